package rdb

import "strings"

// A task's value in the tasks hash (lib.lua's add_task) is
//
//	"\x01" tenant "\x00" prio seq message
//
// its member up to the seq (prio and seq: 10 bytes, fixed), then the
// message as the caller gave it: the member (pending order, tenant) costs
// no field of its own. Values written by earlier releases are the bare
// message (a JSON object) with the member in id|m (the previous release) or
// nowhere (the one before). Everything rdb hands out is the message alone;
// splitStored is the one place that cuts the head off.

// headTail is the width of prio and seq at the end of a head.
const headTail = 10

// splitStored splits a stored value into the member's head (tenant \0 prio
// seq: the member is head \0 id) and the message; head is "" for a value
// written by an earlier release.
func splitStored(v string) (head, msg string) {
	if v == "" || v[0] != 1 {
		return "", v
	}
	z := strings.IndexByte(v[1:], 0)
	if z < 0 || len(v) < 1+z+1+headTail {
		return "", v
	}
	e := 1 + z + 1 + headTail
	return v[1:e], v[e:]
}

// storedMember is id's member from its stored value v, or legacy (the
// id|m an earlier release recorded) for a value without a head.
func storedMember(id, v, legacy string) string {
	if head, _ := splitStored(v); head != "" {
		return head + "\x00" + id
	}
	return legacy
}
