package openaicost

import (
	"fmt"
	"strings"
	"sync"

	"github.com/tiktoken-go/tokenizer"

	"github.com/sluicehq/sluice/throttle"
)

// The encodings of OpenAI's chat and embedding models.
const (
	// O200kBase is the encoding of gpt-4o, gpt-4.1, gpt-4.5, gpt-5 and the o-series models.
	O200kBase = "o200k_base"
	// Cl100kBase is the encoding of gpt-4, gpt-3.5-turbo and the text-embedding models.
	Cl100kBase = "cl100k_base"
)

// The framing of the chat format, from OpenAI's cookbook "How to count tokens with tiktoken", for
// every model since gpt-3.5-turbo-0613. The retired gpt-3.5-turbo-0301 counted 4 per message and
// -1 per name; it is not special-cased.
const (
	tokensPerMessage = 3 // <|start|>{role}<|message|>...<|end|>, less the role itself
	tokensPerName    = 1
	replyPriming     = 3 // <|start|>assistant<|message|>
)

// Message is one message of a chat completion request, as far as counting goes: its role ("system",
// "developer", "user", "assistant", "tool"), its text content, and its optional name (the
// participant's name; the zero value means none).
type Message struct {
	Role, Content, Name string
}

// modelPrefixes map model names to encodings by prefix, more specific prefixes first (gpt-4o before
// gpt-4). Dated snapshots (gpt-4o-2024-08-06) and variants (gpt-4o-mini) match their family's
// prefix.
var modelPrefixes = []struct{ prefix, encoding string }{
	{"gpt-4o", O200kBase},
	{"gpt-4.1", O200kBase},
	{"gpt-4.5", O200kBase},
	{"gpt-5", O200kBase},
	{"chatgpt-4o", O200kBase},
	{"o1", O200kBase},
	{"o3", O200kBase},
	{"o4", O200kBase},
	{"gpt-4", Cl100kBase},
	{"gpt-3.5", Cl100kBase},
	{"gpt-35", Cl100kBase}, // Azure's spelling of gpt-3.5-turbo
	{"text-embedding-3", Cl100kBase},
	{"text-embedding-ada-002", Cl100kBase},
}

// EncodingFor returns the tokenizer encoding of model, O200kBase or Cl100kBase, and whether model
// is one it knows. It matches names by prefix, so dated snapshots (gpt-4o-2024-08-06, gpt-4-0613)
// and variants (gpt-4o-mini, o3-mini, gpt-5-nano) resolve to their family's encoding, and a
// fine-tuned model ("ft:gpt-4o-mini-2024-07-18:org::id") to its base model's.
//
// An unknown model gets O200kBase with known false: it is the encoding of every current OpenAI
// chat model, and for English text the counts of cl100k_base differ from it by a few percent, so it
// is the better guess for a model newer than this package. Names are matched as the API spells
// them, in lower case.
//
// EncodingFor is safe for concurrent use and does not load a vocabulary.
func EncodingFor(model string) (enc string, known bool) {
	base := strings.TrimPrefix(model, "ft:")
	for _, p := range modelPrefixes {
		if strings.HasPrefix(base, p.prefix) {
			return p.encoding, true
		}
	}
	return O200kBase, false
}

// lazyCodec loads an encoding's vocabulary on first use, once.
type lazyCodec struct {
	once  sync.Once
	codec tokenizer.Codec
	err   error
}

// codecs are the loaded encodings. Loading one builds its vocabulary's map (about 60 ms and 5 MB of
// heap on a 2-core machine) and compiles its split pattern, so each is loaded once per process and
// shared: a codec is safe for concurrent counting (its vocabulary is read-only after loading, and
// its regexp2 pattern is safe for concurrent use) as long as no one changes its error mode, which
// this package never does.
var codecs = map[string]*lazyCodec{O200kBase: {}, Cl100kBase: {}}

func codecFor(encoding string) (tokenizer.Codec, error) {
	lc := codecs[encoding]
	lc.once.Do(func() {
		lc.codec, lc.err = tokenizer.Get(tokenizer.Encoding(encoding))
		if lc.err != nil {
			lc.err = fmt.Errorf("openaicost: load encoding %s: %w", encoding, lc.err)
		}
	})
	return lc.codec, lc.err
}

// CountMessages returns the prompt tokens of msgs for model, as OpenAI counts them: the tokens of
// each message's role, content and name in the model's encoding ([EncodingFor]; an unknown model is
// counted in o200k_base), plus 3 per message, 1 per message with a name, and 3 for the priming of
// the reply. With no messages it returns those 3 (the API refuses such a call). It counts text only
// (see the package doc).
//
// The first call for an encoding loads its vocabulary; later calls share it. CountMessages is safe
// for concurrent use. Most callers want [Estimate], which adds the output.
func CountMessages(model string, msgs []Message) (int64, error) {
	enc, _ := EncodingFor(model)
	codec, err := codecFor(enc)
	if err != nil {
		return 0, err
	}
	n := int64(replyPriming)
	for i, m := range msgs {
		n += tokensPerMessage
		for _, s := range [...]string{m.Role, m.Content, m.Name} {
			c, err := codec.Count(s)
			if err != nil {
				return 0, fmt.Errorf("openaicost: count message %d: %w", i, err)
			}
			n += int64(c)
		}
		if m.Name != "" {
			n += tokensPerName
		}
	}
	return n, nil
}

// Estimate returns what a chat completion call reserves against OpenAI's limits: its prompt tokens
// ([CountMessages]) as Input and maxTokens, the request's max_tokens (max_completion_tokens), as
// Output. OpenAI's tokens-per-minute limit counts both in one budget, so a route's Cost wants
// [throttle.Cost.Total]. Zero maxTokens reserves no output; a request that sets no max_tokens may
// write up to the model's output limit, so pass that. A negative maxTokens is an error.
//
// Estimate is safe for concurrent use.
func Estimate(model string, msgs []Message, maxTokens int64) (throttle.Cost, error) {
	if maxTokens < 0 {
		return throttle.Cost{}, fmt.Errorf("openaicost: maxTokens must be >= 0, got %d", maxTokens)
	}
	in, err := CountMessages(model, msgs)
	if err != nil {
		return throttle.Cost{}, err
	}
	return throttle.Cost{Input: in, Output: maxTokens}, nil
}
