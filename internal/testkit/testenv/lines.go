package testenv

import (
	"bytes"
	"sync"
)

// LineWriter is an io.Writer that calls Func with each complete line written to it, without its
// newline: a subprocess's stdout or stderr read line by line. A last line with no newline is never
// handed on. It is safe for concurrent use.
type LineWriter struct {
	Func func(line string)

	mu  sync.Mutex
	buf []byte
}

// Write buffers p and calls Func with each line it completes.
func (w *LineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.Func(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
}
