package main

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/openaicost"
)

// TestPromptTokens checks the provider's own count against the prompt_tokens the OpenAI API
// reported for the messages of OpenAI's cookbook "How to count tokens with tiktoken".
func TestPromptTokens(t *testing.T) {
	msgs := []promptMessage{
		{Role: "system", Content: "You are a helpful, pattern-following assistant that translates corporate jargon into plain English."},
		{Role: "system", Name: "example_user", Content: "New synergies will help drive top-line growth."},
		{Role: "system", Name: "example_assistant", Content: "Things working well together will increase revenue."},
		{Role: "system", Name: "example_user", Content: "Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage."},
		{Role: "system", Name: "example_assistant", Content: "Let's talk later when we're less busy about how to do better."},
		{Role: "user", Content: "This late pivot means we don't have time to boil the ocean for the client deliverable."},
	}
	for model, want := range map[string]int64{"gpt-4": 129, "gpt-3.5-turbo": 129, "gpt-4o": 124, "gpt-4o-mini": 124} {
		got, err := PromptTokens(model, msgs)
		require.NoError(t, err)
		require.Equal(t, want, got, model)
	}
	_, err := PromptTokens("fake-gpt", msgs)
	require.Error(t, err, "a model the tokenizer does not know")
}

// TestPromptTokens_MatchesEstimate checks, on the short scenario's documents and questions, that the
// routes' estimate (openaicost) and the provider's count agree: the demo's error figure shows the
// same over a run.
func TestPromptTokens_MatchesEstimate(t *testing.T) {
	cfg := ShortSharedConfig()
	work, err := cfg.work()
	require.NoError(t, err)
	check := func(system, user string) {
		p, _, err := callTokens(system, user, 0)
		require.NoError(t, err)
		est, err := openaicost.CountMessages(chatModel, chatMessages(system, user))
		require.NoError(t, err)
		require.Equal(t, p, est)
		require.Greater(t, charsDiv4(system, user), p, "chars/4 overestimates these documents")
	}
	for _, ds := range work.docs {
		for _, d := range ds {
			check(systemPrompt, instruction+d.Text)
		}
	}
	for _, q := range work.questions {
		check(answerSystemPrompt, q.Text)
	}
}

// TestProvider_UnknownModel checks that the provider refuses a model it cannot count, as OpenAI
// does, without charging the call.
func TestProvider_UnknownModel(t *testing.T) {
	p := NewProvider(ProviderConfig{TPM: 6000, RPM: 60, BurstSeconds: 10})
	defer p.Close()
	body := []byte(`{"model":"fake-gpt","messages":[{"role":"user","content":"hello world"}]}`)
	resp, err := http.Post(p.URL()+"chat/completions", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Zero(t, p.Stats().Requests)
}
