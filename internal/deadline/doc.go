// Package deadline gives a wait a context that ends a little before its
// caller's deadline, so that the wait can still answer, before the caller
// gives up, with an error that says what it was waiting for (which
// workers had not pushed, which ranks had not joined).
//
// Concurrency: Early is a plain function; the context it returns is the
// caller's to cancel.
package deadline
