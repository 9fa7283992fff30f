// Package rooms is in a module whose path starts with the fixture's
// ("example.com/floor" + "plan") but is another module.
package rooms

// Name is a fixture constant.
const Name = "rooms"
