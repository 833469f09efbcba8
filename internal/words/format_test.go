package words_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/words"
)

// A figure prints as set: never rounded to 0, which reads as "no limit".
func TestNum(t *testing.T) {
	t.Parallel()
	for v, want := range map[float64]string{
		0: "0", 5: "5", 90_000: "90000", 0.5: "0.5", 0.0001: "0.0001", 1.0 / 3: "0.333", 0.00012345: "0.000123",
		2.5: "2.5", 2.345: "2.35", 1e12: "1000000000000",
	} {
		require.Equal(t, want, words.Num(v), "Num(%v)", v)
	}
}

// Figures are grouped by thousands; a bucket's level is never rounded up to what a ticket
// needs.
func TestGroupedAndFigure(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", -4000: "-4,000", 1234567: "1,234,567", -100: "-100"} {
		require.Equal(t, want, words.Grouped(n), "Grouped(%d)", n)
	}
	for v, want := range map[float64]string{0: "0", 0.4: "0.4", 1: "1", 99.5: "99.5", 999.6: "999", 4000: "4,000", -2500.5: "-2,501", 0.0001: "0.0001"} {
		require.Equal(t, want, words.Figure(v), "Figure(%v)", v)
	}
}

// What holds a ticket reads the same in status, tickets and explain: explain's words, for every
// reason a claim records and every wait an explanation gives; a reason with its limit's key as
// Ticket.WaitReason records it reads as the key's own.
func TestWaitWords(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ reason, key, want string }{
		{"paused", "openai", "the pause of openai"},
		{"concurrency", "tenant:acme", "concurrency of tenant:acme"},
		{"inflight_tokens", "openai", "in-flight tokens of openai"},
		{"rate", "openai", "requests of openai"},
		{"tokens", "openai", "tokens of openai"},
		{"input_tokens", "anthropic", "input tokens of anthropic"},
		{"output_tokens", "anthropic", "output tokens of anthropic"},
		{"allowance", "tenant:acme", "allowance of tenant:acme"},
		{"ahead", "openai", "tickets ahead in openai"},
		{"ahead", "", "tickets ahead"},
		{"not_before", "openai", "its retry's backoff"},
		{"unknown_limit", "gone", "limit gone, which does not exist"},
		{"", "openai", "none"},
	} {
		require.Equal(t, c.want, words.WaitWords(c.reason, c.key), "WaitWords(%q, %q)", c.reason, c.key)
	}
}
