package main

import (
	"fmt"
	"sync"

	"github.com/tiktoken-go/tokenizer"
)

// The provider's own token count. It uses the tokenizer directly, with its own framing code and the
// tokenizer's own model table, and not the openaicost package: the demo measures openaicost's
// estimate against this count, so the two must not share code.

// promptMessage is one message of a request, as the provider counts it.
type promptMessage struct {
	Role, Content, Name string
}

// providerCodecs are the codecs the provider has loaded, by model name. tokenizer.ForModel builds a
// new codec on every call (its vocabulary is shared, its split pattern compiled anew), so the
// provider keeps one per model.
var providerCodecs struct {
	mu      sync.Mutex
	byModel map[string]tokenizer.Codec
}

// codecForModel is model's codec, or an error for a model the tokenizer does not know.
func codecForModel(model string) (tokenizer.Codec, error) {
	providerCodecs.mu.Lock()
	defer providerCodecs.mu.Unlock()
	if c, ok := providerCodecs.byModel[model]; ok {
		return c, nil
	}
	c, err := tokenizer.ForModel(tokenizer.Model(model))
	if err != nil {
		return nil, fmt.Errorf("model %q: %w", model, err)
	}
	if providerCodecs.byModel == nil {
		providerCodecs.byModel = map[string]tokenizer.Codec{}
	}
	providerCodecs.byModel[model] = c
	return c, nil
}

// PromptTokens is how the provider counts a request's prompt, as OpenAI does for its chat models:
// every message's role, content and name in the model's encoding, 3 tokens of framing per message
// (<|start|>, <|message|> and <|end|>), 1 more for a name, and 3 for the priming of the reply
// (<|start|>assistant<|message|>).
func PromptTokens(model string, msgs []promptMessage) (int64, error) {
	codec, err := codecForModel(model)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, m := range msgs {
		n += 3
		for _, s := range []string{m.Role, m.Content, m.Name} {
			c, err := codec.Count(s)
			if err != nil {
				return 0, err
			}
			n += int64(c)
		}
		if m.Name != "" {
			n++
		}
	}
	return n + 3, nil
}

// CompletionTokens is how long the provider's answer to a prompt of prompt tokens is: a completion
// that grows with the prompt, up to maxTokens.
func CompletionTokens(prompt, maxTokens int64) int64 {
	return min(maxTokens, 32+prompt/10)
}

// callTokens is the provider's count of one of the demo's calls (a system and a user message to
// chatModel): its prompt, and its completion for maxTokens.
func callTokens(system, user string, maxTokens int64) (prompt, completion int64, err error) {
	prompt, err = PromptTokens(chatModel, []promptMessage{{Role: "system", Content: system}, {Role: "user", Content: user}})
	if err != nil {
		return 0, 0, err
	}
	return prompt, CompletionTokens(prompt, maxTokens), nil
}
