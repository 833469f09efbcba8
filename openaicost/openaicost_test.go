package openaicost

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/tiktoken-go/tokenizer"

	"github.com/sluicehq/sluice/throttle"
)

// cookbookMessages are the messages of OpenAI's cookbook "How to count tokens with tiktoken", whose
// prompt_tokens the OpenAI API reported there: 129 for gpt-3.5-turbo and gpt-4 (cl100k_base), 124
// for gpt-4o and gpt-4o-mini (o200k_base).
var cookbookMessages = []Message{
	{Role: "system", Content: "You are a helpful, pattern-following assistant that translates corporate jargon into plain English."},
	{Role: "system", Name: "example_user", Content: "New synergies will help drive top-line growth."},
	{Role: "system", Name: "example_assistant", Content: "Things working well together will increase revenue."},
	{Role: "system", Name: "example_user", Content: "Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage."},
	{Role: "system", Name: "example_assistant", Content: "Let's talk later when we're less busy about how to do better."},
	{Role: "user", Content: "This late pivot means we don't have time to boil the ocean for the client deliverable."},
}

func TestCountMessages(t *testing.T) {
	t.Parallel()

	t.Run("TokenizerCounts", func(t *testing.T) {
		t.Parallel()
		// The counts the framing below builds on, from the tokenizer itself: "hello world" is
		// "hello" and " world" in both encodings, and each role is one token.
		for _, enc := range []string{Cl100kBase, O200kBase} {
			codec, err := codecFor(enc)
			require.NoError(t, err)
			_, toks, err := codec.Encode("hello world")
			require.NoError(t, err)
			require.Equal(t, []string{"hello", " world"}, toks, enc)
			for _, role := range []string{"system", "user", "assistant"} {
				n, err := codec.Count(role)
				require.NoError(t, err)
				require.Equal(t, 1, n, "%s: %q", enc, role)
			}
		}
	})

	t.Run("KnownCounts", func(t *testing.T) {
		t.Parallel()
		for _, tt := range []struct {
			name  string
			model string
			msgs  []Message
			want  int64
		}{
			// 3 (message) + 1 ("user") + 2 ("hello world") + 3 (reply priming).
			{"OneMessageCl100k", "gpt-4", []Message{{Role: "user", Content: "hello world"}}, 9},
			{"OneMessageO200k", "gpt-4o", []Message{{Role: "user", Content: "hello world"}}, 9},
			// The prompt_tokens the OpenAI API reported for these messages in the cookbook.
			{"CookbookGPT35", "gpt-3.5-turbo", cookbookMessages, 129},
			{"CookbookGPT4", "gpt-4-0613", cookbookMessages, 129},
			{"CookbookGPT4o", "gpt-4o", cookbookMessages, 124},
			{"CookbookGPT4oMini", "gpt-4o-mini-2024-07-18", cookbookMessages, 124},
		} {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				got, err := CountMessages(tt.model, tt.msgs)
				require.NoError(t, err)
				require.Equal(t, tt.want, got)
			})
		}
	})

	t.Run("Framing", func(t *testing.T) {
		t.Parallel()
		// n messages cost their text plus 3n+3; a name costs its text plus 1.
		codec, err := tokenizer.Get(tokenizer.O200kBase) // a codec of the test's own
		require.NoError(t, err)
		text := func(ss ...string) int64 {
			var n int64
			for _, s := range ss {
				c, err := codec.Count(s)
				require.NoError(t, err)
				n += int64(c)
			}
			return n
		}
		msgs := []Message{
			{Role: "system", Content: "You write short, faithful summaries."},
			{Role: "user", Content: "Summarise: the quota binds on tokens."},
			{Role: "assistant", Content: "Tokens bind."},
		}
		for n := 0; n <= len(msgs); n++ {
			got, err := CountMessages("gpt-4o", msgs[:n])
			require.NoError(t, err)
			want := int64(3*n + 3)
			for _, m := range msgs[:n] {
				want += text(m.Role, m.Content)
			}
			require.Equal(t, want, got, "%d messages", n)
		}
		named := []Message{{Role: "user", Content: "hello world", Name: "example_user"}}
		got, err := CountMessages("gpt-4o", named)
		require.NoError(t, err)
		require.Equal(t, 3+text("user", "hello world", "example_user")+1+3, got)
	})

	t.Run("Empty", func(t *testing.T) {
		t.Parallel()
		for _, msgs := range [][]Message{nil, {}} {
			got, err := CountMessages("gpt-4o", msgs)
			require.NoError(t, err)
			require.Equal(t, int64(3), got, "only the reply priming")
		}
		got, err := CountMessages("gpt-4o", []Message{{}})
		require.NoError(t, err)
		require.Equal(t, int64(6), got, "an empty message is its framing")
	})

	t.Run("UnknownModelCountsInO200k", func(t *testing.T) {
		t.Parallel()
		got, err := CountMessages("some-future-model", cookbookMessages)
		require.NoError(t, err)
		require.Equal(t, int64(124), got)
	})
}

func TestEncodingFor(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		model string
		want  string
		known bool
	}{
		{"gpt-4o", O200kBase, true},
		{"gpt-4o-2024-08-06", O200kBase, true},
		{"gpt-4o-mini", O200kBase, true},
		{"gpt-4o-mini-2024-07-18", O200kBase, true},
		{"chatgpt-4o-latest", O200kBase, true},
		{"gpt-4.1", O200kBase, true},
		{"gpt-4.1-nano-2025-04-14", O200kBase, true},
		{"gpt-4.5-preview", O200kBase, true},
		{"gpt-5", O200kBase, true},
		{"gpt-5-mini", O200kBase, true},
		{"gpt-5.1", O200kBase, true},
		{"o1", O200kBase, true},
		{"o1-mini", O200kBase, true},
		{"o3-mini-2025-01-31", O200kBase, true},
		{"o4-mini", O200kBase, true},
		{"ft:gpt-4o-mini:org::id", O200kBase, true},
		{"ft:gpt-4o-mini-2024-07-18:acme:custom:AbC123", O200kBase, true},
		{"gpt-4", Cl100kBase, true},
		{"gpt-4-0613", Cl100kBase, true},
		{"gpt-4-turbo", Cl100kBase, true},
		{"gpt-4-32k", Cl100kBase, true},
		{"gpt-3.5-turbo", Cl100kBase, true},
		{"gpt-3.5-turbo-0125", Cl100kBase, true},
		{"gpt-35-turbo", Cl100kBase, true},
		{"ft:gpt-3.5-turbo-0613:org::id", Cl100kBase, true},
		{"text-embedding-3-small", Cl100kBase, true},
		{"text-embedding-3-large", Cl100kBase, true},
		{"text-embedding-ada-002", Cl100kBase, true},
		{"", O200kBase, false},
		{"fake-gpt", O200kBase, false},
		{"claude-sonnet-4", O200kBase, false},
		{"ft:", O200kBase, false},
	} {
		t.Run(tt.model, func(t *testing.T) {
			t.Parallel()
			enc, known := EncodingFor(tt.model)
			require.Equal(t, tt.want, enc)
			require.Equal(t, tt.known, known)
		})
	}
}

func TestEstimate(t *testing.T) {
	t.Parallel()

	t.Run("InputAndOutput", func(t *testing.T) {
		t.Parallel()
		c, err := Estimate("gpt-4o", cookbookMessages, 256)
		require.NoError(t, err)
		require.Equal(t, throttle.Cost{Input: 124, Output: 256}, c)
		require.Equal(t, int64(380), c.Total())

		c, err = Estimate("gpt-4o", cookbookMessages, 0)
		require.NoError(t, err)
		require.Equal(t, throttle.Cost{Input: 124}, c)
	})

	t.Run("NegativeMaxTokens", func(t *testing.T) {
		t.Parallel()
		c, err := Estimate("gpt-4o", cookbookMessages, -1)
		require.EqualError(t, err, "openaicost: maxTokens must be >= 0, got -1")
		require.Zero(t, c)
	})
}

// TestConcurrentUse counts from many goroutines at once, run with -race. It is not parallel, so it
// runs before the parallel tests resume and its goroutines race to load the vocabularies.
func TestConcurrentUse(t *testing.T) {
	models := []string{"gpt-4o", "gpt-4", "gpt-4o-mini", "gpt-3.5-turbo"}
	want := map[string]int64{"gpt-4o": 124, "gpt-4": 129, "gpt-4o-mini": 124, "gpt-3.5-turbo": 129}
	long := []Message{{Role: "user", Content: strings.Repeat("the quota binds on tokens ", 200)}}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 32 {
		wg.Go(func() {
			model := models[i%len(models)]
			got, err := CountMessages(model, cookbookMessages)
			if err == nil && got != want[model] {
				err = fmt.Errorf("%s: got %d tokens, want %d", model, got, want[model])
			}
			if err == nil {
				_, err = Estimate(model, long, 64)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// TestLibraryDoesNotImport keeps the vocabularies out of programs that do not ask for them: no
// package of the library (samples aside) imports openaicost or the tokenizer.
func TestLibraryDoesNotImport(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	fset := token.NewFileSet()
	var importers []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch {
			case rel == ".":
			case strings.HasPrefix(d.Name(), "."), rel == "openaicost", rel == "samples", rel == "bin", rel == "bench", d.Name() == "testdata", d.Name() == "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == "github.com/sluicehq/sluice/openaicost" || strings.HasPrefix(p, "github.com/tiktoken-go/") {
				importers = append(importers, rel+" imports "+p)
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, importers)
}
