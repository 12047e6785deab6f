// Package config is lvmd's configuration file: the device classes it serves,
// each a volume group and thin pool with its limits. It parses, defaults and
// validates; it runs nothing.
package config
