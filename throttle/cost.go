package throttle

// Cost is a number of tokens by dimension: what a ticket reserves at admission, or what a call used
// as its provider counts it. Input and Output are drawn on the limit's input and output budgets
// (InputTokensPerMinute, OutputTokensPerMinute); their sum, Total, on its combined budget
// (TokensPerMinute) and MaxInflightTokens.
//
// A cost given as one figure (a route's Cost, ReportUsage) is input: Tokens(n) is Cost{Input: n}. On
// a limit with only a combined budget, as OpenAI's, that is the same as before the dimensions
// existed; on a limit with an output budget, give the output part (max_tokens) as Output, or it is
// not reserved there.
type Cost struct {
	Input  int64 `json:"input"`
	Output int64 `json:"output"`
}

// Tokens is a cost given as one figure: n input tokens.
func Tokens(n int64) Cost { return Cost{Input: n} }

// Total is the cost's tokens in all: what a combined budget counts.
func (c Cost) Total() int64 { return satAdd(c.Input, c.Output) }

func (c Cost) nonNegative() Cost { return Cost{Input: max(0, c.Input), Output: max(0, c.Output)} }
