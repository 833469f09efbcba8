package interceptor

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/sluicehq/sluice/internal/dispatcher"
)

// interceptorOnly are the fields of Options the dispatcher does not receive as Tunables: what the
// interceptor reads itself, or hands the dispatcher in another form (Config.Routes).
var interceptorOnly = map[string]bool{"Routes": true}

// TestOptions_Tunables holds Options and dispatcher.Tunables to one list of tunables: every field of
// Options but interceptorOnly is a field of Tunables of the same name and type, which dispatcherConfig
// carries over with its value, and Tunables has no field that Options lacks. A new option is written
// once in Options (field, doc, default) and once in Tunables; forgetting either, or its line in
// dispatcherConfig, fails here.
func TestOptions_Tunables(t *testing.T) {
	t.Parallel()
	ot, tt := reflect.TypeFor[Options](), reflect.TypeFor[dispatcher.Tunables]()

	var o Options
	ov := reflect.ValueOf(&o).Elem()
	for i := range ot.NumField() {
		f := ot.Field(i)
		if interceptorOnly[f.Name] {
			continue
		}
		tf, ok := tt.FieldByName(f.Name)
		require.True(t, ok, "Options.%s is not in dispatcher.Tunables: add it there (or to interceptorOnly)", f.Name)
		require.Equal(t, f.Type, tf.Type, "Options.%s and dispatcher.Tunables.%s differ in type", f.Name, f.Name)
		ov.Field(i).Set(nonZero(t, f.Name, f.Type, i))
	}
	for i := range tt.NumField() {
		_, ok := ot.FieldByName(tt.Field(i).Name)
		require.True(t, ok, "dispatcher.Tunables.%s is not an option", tt.Field(i).Name)
	}
	o.Routes = map[string]Route{"a": {Limits: []string{"x", "y"}}}

	cfg := o.dispatcherConfig("owner-1")
	require.Equal(t, "owner-1", cfg.Owner)
	require.Equal(t, map[string][]string{"a": {"x", "y"}}, cfg.Routes)
	cv := reflect.ValueOf(cfg.Tunables)
	for i := range ot.NumField() {
		name := ot.Field(i).Name
		if interceptorOnly[name] {
			continue
		}
		require.True(t, same(ov.Field(i), cv.FieldByName(name)), "dispatcherConfig does not carry Options.%s", name)
	}
}

// nonZero returns a value of type t that is not its zero value and, for the comparable kinds,
// differs between fields (i is the field's index).
func nonZero(t *testing.T, name string, typ reflect.Type, i int) reflect.Value {
	t.Helper()
	v := reflect.New(typ).Elem()
	switch typ.Kind() {
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(1000 + i))
	case reflect.String:
		v.SetString("value of " + name)
	case reflect.Pointer:
		v.Set(reflect.New(typ.Elem()))
	case reflect.Slice:
		v.Set(reflect.MakeSlice(typ, 1, 1))
	case reflect.Func:
		v.Set(reflect.MakeFunc(typ, func([]reflect.Value) []reflect.Value { return nil }))
	case reflect.Interface:
		impl, ok := implementations[typ]
		require.True(t, ok, "Options.%s: add an implementation of %s to implementations", name, typ)
		v.Set(reflect.ValueOf(impl))
	default:
		require.Failf(t, "unhandled kind", "Options.%s is a %s: teach nonZero to fill it", name, typ.Kind())
	}
	return v
}

// implementations holds a value for each interface type among the options.
var implementations = map[reflect.Type]any{
	reflect.TypeFor[client.Client]():              struct{ client.Client }{},
	reflect.TypeFor[converter.DataConverter]():    struct{ converter.DataConverter }{},
	reflect.TypeFor[converter.FailureConverter](): struct{ converter.FailureConverter }{},
	reflect.TypeFor[trace.TracerProvider]():       struct{ trace.TracerProvider }{},
	reflect.TypeFor[client.MetricsHandler]():      struct{ client.MetricsHandler }{},
}

// same reports whether b holds a's value: the same pointer, slice or function, or an equal value.
func same(a, b reflect.Value) bool {
	switch a.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Func:
		return !b.IsNil() && a.Pointer() == b.Pointer()
	default:
		return a.Interface() == b.Interface()
	}
}
