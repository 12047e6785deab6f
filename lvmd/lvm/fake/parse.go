package fake

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/thinlvm/thinlvm/lvmd/lvm"
)

// command is one parsed command line.
type command struct {
	args   []string
	values map[string][]string
	bools  map[string]bool
	pos    []string
}

var (
	valueOptions = map[string]bool{
		"--virtualsize": true, "--name": true, "--addtag": true, "--activate": true, "--setactivationskip": true,
		"--permission": true, "--size": true, "--config": true, "--zero": true, "--errorwhenfull": true, "--deltag": true,
	}
	boolOptions = map[string]bool{"--ignoreactivationskip": true, "--yes": true, "--force": true, "--thin": true, "--snapshot": true, "--use-policies": true}
)

func (c *command) unsupported(format string, a ...any) error {
	return &lvm.CommandError{Args: c.args, ExitCode: ExitInvalidCommandLine,
		Stderr: "fake lvm: unsupported " + fmt.Sprintf(format, a...) + " in: " + strings.Join(c.args, " ")}
}

// parse splits the arguments after the subcommand into options and
// positional arguments, refusing options the fake does not know.
func (c *command) parse() error {
	c.values, c.bools = map[string][]string{}, map[string]bool{}
	for i := 1; i < len(c.args); i++ {
		a := c.args[i]
		if !strings.HasPrefix(a, "-") {
			c.pos = append(c.pos, a)
			continue
		}
		name, value, hasValue := strings.Cut(a, "=")
		switch {
		case boolOptions[name] && !hasValue:
			c.bools[name] = true
		case valueOptions[name] && hasValue:
			c.values[name] = append(c.values[name], value)
		case valueOptions[name] && i+1 < len(c.args):
			i++
			c.values[name] = append(c.values[name], c.args[i])
		default:
			return c.unsupported("option %q", a)
		}
	}
	return nil
}

// value returns the last value of an option, and whether it was given.
func (c *command) value(name string) (string, bool) {
	v := c.values[name]
	if len(v) == 0 {
		return "", false
	}
	return v[len(v)-1], true
}

// target returns the one positional vg/lv argument.
func (c *command) target() (vg, lv string, err error) {
	if len(c.pos) != 1 {
		return "", "", c.unsupported("positional arguments %q", c.pos)
	}
	vg, lv, ok := strings.Cut(c.pos[0], "/")
	if !ok || vg == "" || lv == "" {
		return "", "", c.unsupported("target %q", c.pos[0])
	}
	return vg, lv, nil
}

// bytesArg parses a size in bytes with lvm's "b" unit, the only unit
// lvm.Client uses; lvm refuses one that is not a whole number of sectors.
func (c *command) bytesArg(name string) (uint64, error) {
	s, ok := c.value(name)
	if !ok {
		return 0, c.unsupported("missing %s", name)
	}
	n, err := strconv.ParseUint(strings.TrimSuffix(s, "b"), 10, 64)
	if err != nil || !strings.HasSuffix(s, "b") || n == 0 {
		return 0, c.unsupported("size %s %q", name, s)
	}
	if n%512 != 0 { // lvm counts in sectors
		up := n + 512 - n%512
		return 0, &lvm.CommandError{Args: c.args, ExitCode: ExitInvalidCommandLine,
			Stderr: fmt.Sprintf("Size is not a multiple of 512. Try using %d or %d.\n  Invalid argument for %s: %s", up-512, up, name, s)}
	}
	return n, nil
}

// fail is a failed lvm command. Its stderr is what ExecRunner keeps of
// lvm's: indented "  " per line, the whole trimmed.
func (c *command) fail(format string, a ...any) error {
	return &lvm.CommandError{Args: c.args, ExitCode: ExitFailed, Stderr: fmt.Sprintf(format, a...)}
}

func roundUp(n, unit uint64) uint64 { return (n + unit - 1) / unit * unit }
