// Package config is lvmd's configuration file: the device classes it serves,
// each a volume group and thin pool with its limits, or a volume group's
// free extents (thick). It parses, defaults and
// validates; it runs nothing.
package config
