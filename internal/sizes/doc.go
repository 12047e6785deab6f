// Package sizes adds byte counts without wrapping: a tenant chooses claim
// sizes, and a sum of them must never overflow into a small or negative
// number that passes a capacity check. It depends on nothing.
package sizes
