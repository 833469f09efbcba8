package testsignal

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/testkit/testenv"
)

// TestMain fails the package's tests when a goroutine outlives them (goleak).
func TestMain(m *testing.M) { testenv.Main(m) }

// fatalTB records a Fatalf instead of ending the test, so that a failing wait can be asserted.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Fatalf(format string, args ...any) { f.msg = fmt.Sprintf(format, args...) }

func TestSignal(t *testing.T) {
	t.Parallel()

	t.Run("ZeroValueIsANoOp", func(t *testing.T) {
		t.Parallel()
		var s Signal[int]
		s.Signal(1) // production: never initialised, never blocks
		require.Nil(t, s.WaitC())
		tb := &fatalTB{TB: t}
		require.Zero(t, s.WaitOrTimeout(tb))
		require.Contains(t, tb.msg, "did not Init")
	})

	t.Run("WaitsForTheNextValue", func(t *testing.T) {
		t.Parallel()
		var s Signal[int]
		s.Init()
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.Signal(7)
		}()
		require.Equal(t, 7, s.WaitOrTimeout(t))
		<-done
	})

	t.Run("WaitUntilSkipsTheValuesBefore", func(t *testing.T) {
		t.Parallel()
		var s Signal[int]
		s.Init()
		for i := range 5 {
			s.Signal(i)
		}
		require.Equal(t, 3, s.WaitUntil(t, func(v int) bool { return v >= 3 }))
		require.Equal(t, 4, s.WaitOrTimeout(t))
	})

	t.Run("AFullSignalDropsTheOldest", func(t *testing.T) {
		t.Parallel()
		var s Signal[int]
		s.Init()
		for i := range capacity + 3 {
			s.Signal(i) // never blocks, though nobody waits
		}
		require.Len(t, s.WaitC(), capacity)
		require.Equal(t, 3, s.WaitOrTimeout(t), "the three oldest were dropped")
	})
}
