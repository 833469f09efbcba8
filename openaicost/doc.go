// Package openaicost estimates what an OpenAI chat completion call reserves against an account's
// tokens-per-minute quota: its prompt tokens, counted as OpenAI counts them, and its max_tokens. Use
// it as a route's Cost so that a ticket reserves what the provider will charge, neither more nor
// less:
//
//	Routes: map[string]sluiceinterceptor.Route{
//		"Summarize": {Limits: []string{"openai"}, Cost: func(args []any) (int64, error) {
//			doc := args[0].(string)
//			c, err := openaicost.Estimate("gpt-4o-mini", []openaicost.Message{
//				{Role: "system", Content: "Summarise the document in three sentences."},
//				{Role: "user", Content: doc},
//			}, 256)
//			return c.Total(), err // OpenAI's TPM is one budget for input and output
//		}},
//	},
//
// It is a package of its own, built on github.com/tiktoken-go/tokenizer, because the vocabularies
// it embeds add about 12 MB to a binary: programs that estimate costs another way do not link them.
// Nothing else in Sluice imports it.
//
// # Counting
//
// [CountMessages] counts a list of chat messages by the rule of OpenAI's cookbook ("How to count
// tokens with tiktoken"): each message's role, content and name in the model's encoding, 3 tokens of
// framing per message, 1 more for a message with a name, and 3 for the priming of the reply
// (<|start|>assistant<|message|>). [Estimate] adds max_tokens as the output and returns a
// [throttle.Cost]. [EncodingFor] is the model's encoding, o200k_base or cl100k_base, and says
// whether the model is known.
//
// # What is not counted
//
// Text content only: images, audio, tool and function definitions, and structured output schemas
// add tokens by rules OpenAI does not publish, and are not counted. For such calls, add a margin
// to the estimate, and report the real usage (sluiceactivity.ReportTokens) so that the reservation
// is reconciled.
package openaicost
