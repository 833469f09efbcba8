package gate

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/activity"
	"github.com/sluicehq/sluice/throttle"
)

// The contract's fixtures, testdata/contract/*.json, are read by this test and by the TypeScript
// client's (clients/typescript/test/contract.test.ts): each side decodes them into its own types and
// writes them back unchanged, and together a type's fixtures give every field of it, so that a field
// added, renamed or dropped on one side fails a test until the other side follows.

// fixtures returns the fixture files whose names start with prefix, by name.
func fixtures(t *testing.T, prefix string) map[string][]byte {
	t.Helper()
	names, err := filepath.Glob(filepath.Join("testdata", "contract", prefix+"*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, names, "no fixture testdata/contract/%s*.json", prefix)
	out := map[string][]byte{}
	for _, n := range names {
		b, err := os.ReadFile(n)
		require.NoError(t, err)
		out[filepath.Base(n)] = b
	}
	return out
}

// jsonFields returns the JSON names of typ's fields.
func jsonFields(typ reflect.Type) []string {
	var out []string
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// checkFixtures decodes each fixture of prefix into a T, refusing unknown fields, checks it with
// validate (when not nil), and that it encodes back to the same JSON; and that the fixtures together
// give every field of T.
func checkFixtures[T any](t *testing.T, prefix string, validate func(T) error) {
	t.Helper()
	seen := map[string]bool{}
	for name, b := range fixtures(t, prefix) {
		var v T
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		require.NoError(t, dec.Decode(&v), "%s: a field that is not in gate/contract.go", name)
		if validate != nil {
			require.NoError(t, validate(v), "%s: the gate refuses the fixture", name)
		}
		again, err := json.Marshal(v)
		require.NoError(t, err)
		require.JSONEq(t, string(b), string(again), "%s: does not encode back to itself", name)
		var m map[string]any
		require.NoError(t, json.Unmarshal(b, &m))
		for k := range m {
			seen[k] = true
		}
	}
	var got []string
	for k := range seen {
		got = append(got, k)
	}
	sort.Strings(got)
	require.Equal(t, jsonFields(reflect.TypeFor[T]()), got,
		"the %s*.json fixtures together must give every field (the TypeScript client's test reads them too)", prefix)
}

func TestContractFixtures(t *testing.T) {
	checkFixtures(t, "acquire_request", AcquireRequest.validate)
	checkFixtures[Permit](t, "permit", nil)
	checkFixtures(t, "release_request", ReleaseRequest.validate)
	checkFixtures(t, "release_result", func(r ReleaseResult) error {
		require.Contains(t, []string{"", ReasonReleased, ReasonLapsed, ReasonWorkflowClosed, ReasonUnknown}, r.Reason)
		return nil
	})

	// The refusal, the detail of a SluiceAllowanceSpent failure, as the plugin writes it.
	for name, b := range fixtures(t, "refusal") {
		var r throttle.Refusal
		require.NoError(t, json.Unmarshal(b, &r), name)
		again, err := json.Marshal(r)
		require.NoError(t, err)
		require.JSONEq(t, string(b), string(again), "%s: does not encode back to itself", name)
	}

	// The constants, as the TypeScript client declares them.
	var k struct {
		ContractVersion int               `json:"contract_version"`
		AcquireActivity string            `json:"acquire_activity"`
		ReleaseActivity string            `json:"release_activity"`
		ErrorTypes      map[string]string `json:"error_types"`
		Reasons         []string          `json:"reasons"`
		MaxLimits       int               `json:"max_limits"`
		MaxHoldMS       int64             `json:"max_hold_ms"`
		MaxTokens       int64             `json:"max_tokens"`
	}
	b := fixtures(t, "constants")["constants.json"]
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&k))
	require.Equal(t, ContractVersion, k.ContractVersion)
	require.Equal(t, AcquireActivity, k.AcquireActivity)
	require.Equal(t, ReleaseActivity, k.ReleaseActivity)
	require.Equal(t, map[string]string{
		"allowance_spent": activity.ErrTypeAllowanceSpent,
		"bad_request":     ErrTypeBadRequest,
		"unknown_limit":   ErrTypeUnknownLimit,
		"version":         ErrTypeVersion,
	}, k.ErrorTypes)
	require.Equal(t, []string{ReasonReleased, ReasonLapsed, ReasonWorkflowClosed, ReasonUnknown}, k.Reasons)
	require.Equal(t, MaxLimits, k.MaxLimits)
	require.Equal(t, MaxHold.Milliseconds(), k.MaxHoldMS)
	require.Equal(t, int64(MaxTokens), k.MaxTokens)
}
