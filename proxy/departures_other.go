//go:build !linux

package proxy

import "syscall"

// canPeek says clientGone can look at a socket here: not on this system,
// where a departed client is noticed at the stream's next write.
const canPeek = false

func clientGone(syscall.RawConn) bool { return false }

func clientGoneNow(syscall.RawConn) bool { return false }

func bytesWaiting(syscall.RawConn) bool { return false }
