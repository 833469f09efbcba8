package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"
)

// writeJSON writes v as one line of JSON, in the command's conventions (see friendly): the JSON
// names of pgqueue's and throttle's types, with durations in seconds and no sentinel numbers.
func writeJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	tree, err := decodeOrdered(dec)
	if err != nil {
		return fmt.Errorf("json: %w", err)
	}
	return json.NewEncoder(w).Encode(friendly(tree))
}

// friendly rewrites the JSON of the library's types, which the dashboard's API serves as they are,
// for people and scripts reading the command's: a duration is in seconds, named with _s (a rolling
// allowance's period: rolling_s, beside oldest_wait_s, waited_s and expected_in_s), and what is not
// known is null, not -1 (a ticket's actual_cost and actual_money with no usage reported, and then its
// actual_output too). Instants stay RFC 3339; limits' figures keep 0 for not set, as the flags take.
func friendly(v any) any {
	switch x := v.(type) {
	case object:
		unreported := false
		for i, m := range x {
			x[i].val = friendly(m.val)
			switch n, isNum := m.val.(json.Number); {
			case m.key == "rolling" && isNum:
				if ns, err := n.Int64(); err == nil {
					x[i] = member{"rolling_s", json.Number(strconv.FormatFloat(time.Duration(ns).Seconds(), 'f', -1, 64))}
				}
			case (m.key == "actual_cost" || m.key == "actual_money") && n == "-1":
				x[i].val = nil
				unreported = unreported || m.key == "actual_cost"
			}
		}
		for i, m := range x {
			if unreported && m.key == "actual_output" {
				x[i].val = nil
			}
		}
	case []any:
		for i := range x {
			x[i] = friendly(x[i])
		}
	}
	return v
}

// object is a JSON object with its members in their order: the order of the struct's fields.
type object []member

type member struct {
	key string
	val any
}

// MarshalJSON writes the members in order.
func (o object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := json.Marshal(m.key)
		if err != nil {
			return nil, err
		}
		v, err := json.Marshal(m.val)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// decodeOrdered reads one JSON value: objects as object, arrays as []any, numbers as json.Number.
func decodeOrdered(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		o := object{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			v, err := decodeOrdered(dec)
			if err != nil {
				return nil, err
			}
			o = append(o, member{k.(string), v})
		}
		_, err = dec.Token() // }
		return o, err
	case json.Delim('['):
		a := []any{}
		for dec.More() {
			v, err := decodeOrdered(dec)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err = dec.Token() // ]
		return a, err
	}
	return tok, nil
}
