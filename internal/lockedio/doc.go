// Package lockedio serialises writes that come from several goroutines:
// children's stderr into one stream, and buffers a test reads while
// processes still write them.
//
// Concurrency: that is the point: Write and String may be called from any
// goroutine. A Writer owns nothing; W stays the caller's.
package lockedio
