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

// CostOf is the cost of total tokens of which output are output tokens and the rest input: how a
// ticket's reservation is stored and given (a total, and its output part). It does not clamp; a
// reservation is validated when the ticket is written, and ReportedUsage clamps reported usage.
func CostOf(total, output int64) Cost { return Cost{Input: total - output, Output: output} }

// Total is the cost's tokens in all: what a combined budget counts.
func (c Cost) Total() int64 { return satAdd(c.Input, c.Output) }

func (c Cost) nonNegative() Cost { return Cost{Input: max(0, c.Input), Output: max(0, c.Output)} }

// ReportedUsage is the usage a run reported, given as its total tokens (negative: not reported) and
// the part of them of output tokens: the Cost, its output part clamped to [0, total] and the rest
// input, and true; or, when nothing was reported, the zero Cost and false. Pass both to ReleasedCost.
func ReportedUsage(total, output int64) (Cost, bool) {
	if total < 0 {
		return Cost{}, false
	}
	return CostOf(total, min(max(output, 0), total)), true
}
