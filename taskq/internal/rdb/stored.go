package rdb

import "strings"

// A task's value in the tasks hash (lib.lua's add_task) is
//
//	"\x01" tenant "\x00" prio seq "\x00" message
//
// its member without the id, then the message as the caller gave it: the
// member (pending order, tenant) costs no field of its own. Values written
// by earlier releases are the bare message (a JSON object) with the member
// in id|m (the previous release) or nowhere (the one before). Everything
// rdb hands out is the message alone; splitStored is the one place that
// cuts the head off.

// splitStored splits a stored value into the member's head (tenant \0 prio
// seq \0: the member is head + id) and the message; head is "" for a value
// written by an earlier release.
func splitStored(v string) (head, msg string) {
	if v == "" || v[0] != 1 {
		return "", v
	}
	z := strings.IndexByte(v[1:], 0)
	if z < 0 {
		return "", v
	}
	e := strings.IndexByte(v[z+2:], 0)
	if e < 0 {
		return "", v
	}
	e += z + 2
	return v[1 : e+1], v[e+1:]
}

// storedMember is id's member from its stored value v, or legacy (the
// id|m an earlier release recorded) for a value without a head.
func storedMember(id, v, legacy string) string {
	if head, _ := splitStored(v); head != "" {
		return head + id
	}
	return legacy
}
