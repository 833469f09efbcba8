// Package codesize holds one test: it keeps the library's functions and files small enough to read
// in one sitting (at most MaxFuncLines and MaxFileLines), and test files within MaxTestFileLines.
// Samples and generated code are not counted, nor tests but for their files' length.
package codesize

// The limits the test enforces.
const (
	MaxFuncLines     = 80
	MaxFileLines     = 350
	MaxTestFileLines = 800
)
