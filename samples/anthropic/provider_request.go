package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode"
)

// messagesRequest is the part of a Messages API request (and of a count_tokens request) the fake
// reads.
type messagesRequest struct {
	Model     string          `json:"model"`
	MaxTokens int64           `json:"max_tokens"`
	System    json.RawMessage `json:"system"`
	Messages  []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
}

// textBlock is a text content block, or a system prompt block.
type textBlock struct {
	Type         string `json:"type"`
	Text         string `json:"text"`
	CacheControl *struct {
		Type string `json:"type"`
	} `json:"cache_control"`
}

// decodeRequest reads and checks a request body.
func decodeRequest(r *http.Request) (*messagesRequest, error) {
	var req messagesRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		return nil, fmt.Errorf("could not parse the JSON body: %w", err)
	}
	if req.Model == "" {
		return nil, errors.New("model: field required")
	}
	if len(req.Messages) == 0 {
		return nil, errors.New("messages: at least one message is required")
	}
	if _, err := blocks(req.System); err != nil {
		return nil, fmt.Errorf("system: %w", err)
	}
	for i, m := range req.Messages {
		if _, err := blocks(m.Content); err != nil {
			return nil, fmt.Errorf("messages.%d.content: %w", i, err)
		}
	}
	return &req, nil
}

// blocks returns a content field's text blocks: a string is one block, an array its blocks, null or
// absent none.
func blocks(raw json.RawMessage) ([]textBlock, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []textBlock{{Type: "text", Text: s}}, nil
	}
	var bs []textBlock
	if err := json.Unmarshal(raw, &bs); err != nil {
		return nil, errors.New("must be a string or an array of text blocks")
	}
	for _, b := range bs {
		if b.Type != "text" {
			return nil, fmt.Errorf("this fake accepts text blocks only, got %q", b.Type)
		}
	}
	return bs, nil
}

// promptCount is a request's input tokens as the provider counts them.
type promptCount struct {
	system, messages int64 // the system prompt's tokens; the messages' tokens with their framing
	// cacheable are the tokens of the system prompt up to and including its last block marked
	// cache_control {"type": "ephemeral"} (0 without one), and cacheKey identifies that prefix.
	cacheable int64
	cacheKey  string
	last      int64 // the tokens of the last user message: what the answer's length follows
}

func (c promptCount) total() int64 { return c.system + c.messages }

// messageFraming is the tokens the fake counts for each message besides its text (its role and
// delimiters).
const messageFraming = 3

// prompt counts the request's input tokens. decodeRequest has checked the blocks.
func (req *messagesRequest) prompt() promptCount {
	var c promptCount
	sys, _ := blocks(req.System)
	var prefix strings.Builder
	prefix.WriteString(req.Model)
	for _, b := range sys {
		n := countText(b.Text)
		c.system += n
		prefix.WriteString("\x00" + b.Text)
		if b.CacheControl != nil && b.CacheControl.Type == "ephemeral" {
			c.cacheable, c.cacheKey = c.system, prefix.String()
		}
	}
	for _, m := range req.Messages {
		bs, _ := blocks(m.Content)
		var n int64
		for _, b := range bs {
			n += countText(b.Text)
		}
		c.messages += messageFraming + n
		if m.Role == "user" {
			c.last = n
		}
	}
	return c
}

// countText is the fake's stand-in for a tokenizer: one token per run of letters and digits, and one
// per other non-space character (punctuation). It is not Claude's tokenizer, which is not public;
// what matters here is that count_tokens and the charge agree, as Anthropic's do.
func countText(s string) int64 {
	var n int64
	inWord := false
	for _, r := range s {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			if !inWord {
				n++
			}
			inWord = true
		case unicode.IsSpace(r):
			inWord = false
		default:
			n++
			inWord = false
		}
	}
	return n
}

// usage is a response's usage, as the Messages API reports it.
type usage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
}

// writeMessage writes a Messages API response whose text is u.OutputTokens long.
func writeMessage(w http.ResponseWriter, id int64, model, stop string, u usage) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id":            fmt.Sprintf("msg_fake_%06d", id),
		"type":          "message",
		"role":          "assistant",
		"model":         model,
		"content":       []map[string]string{{"type": "text", "text": answerText(u.OutputTokens)}},
		"stop_reason":   stop,
		"stop_sequence": nil,
		"usage":         u,
	})
}

// answerWords are what the fake's answers are made of.
var answerWords = strings.Fields(`the report finds that costs fell while revenue grew and the team
	plans to review the contract next quarter with the customer`)

// answerText is an answer of n tokens, by countText.
func answerText(n int64) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(answerWords[i%int64(len(answerWords))])
	}
	return b.String()
}
