// Package codesize holds one test: it keeps the library's functions and files small enough to read
// in one sitting (at most MaxFuncLines and MaxFileLines). Tests, samples and generated code are not
// counted.
package codesize

// The limits the test enforces.
const (
	MaxFuncLines = 80
	MaxFileLines = 350
)
