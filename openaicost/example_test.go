package openaicost_test

import (
	"fmt"

	"github.com/sluicehq/sluice/openaicost"
)

func Example() {
	msgs := []openaicost.Message{
		{Role: "system", Content: "You are a careful analyst. You write short, faithful summaries."},
		{Role: "user", Content: "Summarise the following document in three sentences:\n\nhello world"},
	}
	enc, known := openaicost.EncodingFor("gpt-4o-mini-2024-07-18")
	fmt.Println("encoding:", enc, known)

	// What a call with max_tokens 256 reserves against the account's tokens per minute: the
	// system prompt is 13 tokens and the user's 12, each message adds 3 of framing and 1 for its
	// role, and the reply's priming 3: 36 in all.
	c, err := openaicost.Estimate("gpt-4o-mini-2024-07-18", msgs, 256)
	if err != nil {
		panic(err)
	}
	fmt.Printf("input %d, output %d, total %d\n", c.Input, c.Output, c.Total())

	_, err = openaicost.Estimate("gpt-4o-mini", msgs, -1)
	fmt.Println(err)
	// Output:
	// encoding: o200k_base true
	// input 36, output 256, total 292
	// openaicost: maxTokens must be >= 0, got -1
}
