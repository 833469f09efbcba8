package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
)

// chatRequest is the part of an OpenAI-style chat completion request the fake provider reads: the
// model, the prompt's size in tokens (a real client sends the text; the sample sends its length), the
// part of it the provider has cached, and max_tokens.
type chatRequest struct {
	Model        string `json:"model"`
	PromptTokens int64  `json:"prompt_tokens"`
	CachedTokens int64  `json:"cached_tokens"`
	MaxTokens    int64  `json:"max_tokens"`
	Question     int    `json:"question"`
}

// chatUsage is the usage of a response, as OpenAI reports it.
type chatUsage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	PromptTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// Provider is a fake LLM API over HTTP: it answers every question with a completion of between 40%
// and 100% of max_tokens (the same for the same question), and reports the usage as OpenAI does.
// It counts the calls it served per model.
type Provider struct {
	srv   *httptest.Server
	mu    sync.Mutex
	calls int
}

// NewProvider starts the fake provider; Close stops it.
func NewProvider() *Provider {
	p := &Provider{}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	return p
}

// URL is the chat completions endpoint.
func (p *Provider) URL() string { return p.srv.URL + "/v1/chat/completions" }

// Close stops the provider.
func (p *Provider) Close() { p.srv.Close() }

// Calls is how many calls the provider served.
func (p *Provider) Calls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}

func (p *Provider) serve(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.PromptTokens < 0 || req.MaxTokens <= 0 ||
		req.CachedTokens > req.PromptTokens {
		http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	p.calls++
	p.mu.Unlock()
	var u chatUsage
	u.PromptTokens, u.PromptTokensDetails.CachedTokens = req.PromptTokens, req.CachedTokens
	u.CompletionTokens = req.MaxTokens * int64(40+(req.Question*37)%61) / 100
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"usage": u, "choices": []any{map[string]any{"message": map[string]string{
		"role": "assistant", "content": "an answer"}}}})
}
