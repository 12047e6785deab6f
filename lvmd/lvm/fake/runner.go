package fake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/thinlvm/thinlvm/api/lvmname"
	"github.com/thinlvm/thinlvm/lvmd/lvm"
)

// DefaultExtentSize is the extent size of a VG whose ExtentSize is 0:
// lvm2's default, 4 MiB.
const DefaultExtentSize = 4 << 20

// lvm2's exit codes (tools/errors.h).
const (
	// ExitFailed is ECMD_FAILED, what lvm2 exits with when a command fails.
	ExitFailed = 5
	// ExitInvalidCommandLine is EINVALID_CMD_LINE; the fake also uses it for
	// arguments it does not understand.
	ExitInvalidCommandLine = 3
)

// VG is a simulated volume group. Free is what is left after the thin
// pools; thin LVs take nothing from it.
type VG struct {
	Name       string
	UUID       string
	Size, Free uint64
	// ExtentSize is 0 for DefaultExtentSize.
	ExtentSize uint64
	// MetadataAreaSize is the VG's metadata area (vg_mda_size); 0 for
	// lvm2's default, DefaultMetadataAreaSize. The fake keeps the VG's
	// metadata size as lvm2 would write it (MetadataBytes) and fails a
	// change that would not fit, as lvm2 does, changing nothing.
	MetadataAreaSize uint64
	// seqno is the metadata's sequence number, as lvm's error names it.
	seqno int
}

// DefaultMetadataAreaSize is lvm2's default metadata area, what pvcreate
// makes without --metadatasize: 1020 KiB, up to the first extent at 1 MiB.
const DefaultMetadataAreaSize = 1044480

// The fake's model of a VG's text metadata, from lvm2 2.03.16 in the test
// VM: an empty VG's is under 768 bytes, a thin pool (with its hidden data,
// metadata and spare LVs) adds about 1.5 KiB, a thin LV about 300 bytes
// plus its name and tags, a snapshot about 15 more and its origin's name.
const (
	metadataVGBytes   = 700
	metadataPoolBytes = 1536
	metadataLVBytes   = 300
)

// lvMetadataBytes is lv's section; a snapshot's has an origin line.
func lvMetadataBytes(lv *LV) uint64 {
	n := uint64(metadataLVBytes + len(lv.Name))
	if lv.Origin != "" {
		n += uint64(15 + len(lv.Origin))
	}
	for _, t := range lv.Tags {
		n += uint64(len(t)) + 4
	}
	return n
}

func metadataAreaSize(vg *VG) uint64 {
	if vg.MetadataAreaSize == 0 {
		return DefaultMetadataAreaSize
	}
	return vg.MetadataAreaSize
}

// metadataMax is the largest copy of the metadata an area takes: lvm2
// writes the new copy beside the old in a circular buffer after a
// 512-byte header, and aligns it to a sector.
func metadataMax(vg *VG) uint64 { return (metadataAreaSize(vg)-512)/2 - 512 }

// metadataBytes is the size of vg's metadata, plus extra.
func (r *Runner) metadataBytes(vg *VG) uint64 {
	n := uint64(metadataVGBytes)
	for _, p := range r.Pools {
		if p.VG == vg.Name {
			n += metadataPoolBytes
		}
	}
	for _, lv := range r.LVs {
		if lv.VG == vg.Name {
			n += lvMetadataBytes(&lv)
		}
	}
	return n
}

// metadataFree is vg_mda_free: the room left in whole sectors.
func (r *Runner) metadataFree(vg *VG) uint64 {
	used, limit := r.metadataBytes(vg), metadataMax(vg)
	if used >= limit {
		return 0
	}
	return (limit - used) / 512 * 512
}

// writeMetadata is lvm2's vg_write of a change that adds grow bytes to
// vg's metadata: lvm's error when the new metadata does not fit.
func (r *Runner) writeMetadata(c *command, vg *VG, grow uint64) error {
	vg.seqno++
	if size := r.metadataBytes(vg) + grow; size > metadataMax(vg) {
		return c.fail("VG %s %d metadata on /dev/fake-%s (%d bytes) exceeds maximum metadata size (%d bytes)\n  Failed to write VG %s.",
			vg.Name, vg.seqno, vg.Name, size, metadataMax(vg), vg.Name)
	}
	return nil
}

// Pool is a simulated thin pool. The test sets its use; growing the pool
// scales the use down, as the same data then fills a larger pool.
type Pool struct {
	VG, Name                     string
	UUID                         string
	Size                         uint64
	DataPercent, MetadataPercent float64
	// WhenFull is lv_when_full: "" reports lvm2's default, "queue";
	// lvchange --errorwhenfull sets "error" or "queue".
	WhenFull string
	// ReadOnly is a pool the kernel made read-only (metadata full); a pool
	// at 100% data is reported out of data space.
	ReadOnly bool
	// Inactive is a pool an administrator deactivated (lvchange -an, e.g.
	// to repair it): no "a" in its attributes and no data or metadata use.
	Inactive bool
	// ChunkSize is the pool's block size; 0 reports lvm2's default, 64 KiB.
	ChunkSize uint64
}

// LV is a simulated thin LV or thin snapshot (Origin set).
type LV struct {
	VG, Name, Pool string
	UUID           string
	Origin         string
	Size           uint64
	Tags           []string
	ReadOnly       bool
	// Inactive LVs report no data use and no "a" in their attributes.
	Inactive bool
	// SkipActivation is lvm's activation skip flag, set on thin snapshots
	// unless created with --setactivationskip n.
	SkipActivation bool
	// DataPercent is the LV's share of its own size that is written.
	DataPercent float64
	// ThinID is the LV's thin device id; 0 gets the next free one in the
	// VG at the next command.
	ThinID uint32
}

// Failure makes a command fail without changing anything.
type Failure struct {
	// Subcommand is the lvm subcommand (args[0]) that fails; empty for any.
	Subcommand string
	// ExitCode is 0 for ExitFailed.
	ExitCode int
	Stderr   string
	// OutcomeUnknown: the command takes effect, and then Run returns an
	// error wrapping lvm.ErrOutcomeUnknown, as lvm.ShellRunner does when
	// the shell dies before it reports (ExitCode and Stderr are unused).
	OutcomeUnknown bool
}

// Runner is an in-memory lvm.Runner. Set its fields before the first Run;
// afterwards read and change its state only through its methods, which are
// safe for concurrent use.
type Runner struct {
	// VGs, Pools and LVs are the simulated state.
	VGs   []VG
	Pools []Pool
	LVs   []LV
	// DevDir, when set, backs every thin LV by a sparse file of its size,
	// DevDir/<vg>/<lv> (its device path), which a thin snapshot copies and
	// lvremove removes: code that writes to devices runs in unit tests.
	DevDir string
	// Failures fail the next matching commands, first first.
	Failures []Failure
	// OnRun, when set, is called with every started command's context and
	// arguments before the command changes anything, without the Runner's
	// lock held. It may block, as a slow lvm would: like lvm.ExecRunner,
	// Run then returns an *lvm.StillRunningError when ctx ends, and the
	// command still completes when OnRun returns.
	OnRun func(ctx context.Context, args []string)

	mu     sync.Mutex
	calls  [][]string
	counts map[string]int
	nextID int
	// held are the pools ("vg/pool") that hold a metadata snapshot.
	held map[string]bool
}

var _ lvm.Runner = (*Runner)(nil)

// Run implements lvm.Runner. A command whose context has ended is not
// started: it is not recorded and changes nothing.
func (r *Runner) Run(ctx context.Context, args ...string) ([]byte, error) {
	args = withoutMonitoring(args)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("fake lvm %s: not started: %w", strings.Join(args, " "), err)
	}
	// The command runs here as lvm.ExecRunner's process does: to its end,
	// whether or not Run still waits for it.
	done := make(chan struct{})
	var out []byte
	var err error
	go func() {
		defer close(done)
		if r.OnRun != nil {
			r.OnRun(ctx, args)
		}
		out, err = r.run(args)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		select {
		case <-done:
		default:
			return nil, &lvm.StillRunningError{Args: args, Done: done, Err: ctx.Err()}
		}
	}
	return out, err
}

// withoutMonitoring is a copy of args without the "activation/monitoring=0"
// a containerized lvmd gives every command (lvm.ExecRunner.Config): there
// is no dmeventd to simulate. A --config left empty goes too.
func withoutMonitoring(args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		if args[i] == "--config" && i+1 < len(args) {
			v := strings.Join(slices.DeleteFunc(strings.Fields(args[i+1]), func(f string) bool { return f == "activation/monitoring=0" }), " ")
			i++
			if v != "" {
				out = append(out, "--config", v)
			}
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// run simulates one command.
func (r *Runner) run(args []string) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, args)
	sub := ""
	if len(args) > 0 {
		sub = args[0]
	}
	if r.counts == nil {
		r.counts = map[string]int{}
	}
	r.counts[sub]++
	unknown := false
	for i, f := range r.Failures {
		if f.Subcommand == "" || f.Subcommand == sub {
			r.Failures = slices.Delete(r.Failures, i, i+1)
			if f.OutcomeUnknown {
				unknown = true
				break
			}
			code := f.ExitCode
			if code == 0 {
				code = ExitFailed
			}
			return nil, &lvm.CommandError{Args: args, ExitCode: code, Stderr: f.Stderr}
		}
	}
	for i := range r.LVs { // the LVs a test set or added, in their order
		r.thinID(&r.LVs[i])
	}
	c := &command{args: args}
	var out string
	var err error
	switch sub {
	case "fullreport":
		out, err = r.fullReport(c)
	case "lvcreate":
		out, err = r.lvcreate(c)
	case "lvextend":
		out, err = r.lvextend(c)
	case "lvremove":
		out, err = r.lvremove(c)
	case "lvchange":
		out, err = r.lvchange(c)
	case lvm.ToolDMSetup:
		out, err = r.dmsetup(c)
	case lvm.ToolThinDelta:
		out, err = r.thinDelta(c)
	default:
		err = c.unsupported("subcommand %q", sub)
	}
	if unknown {
		return nil, fmt.Errorf("fake lvm %s: %w", strings.Join(args, " "), lvm.ErrOutcomeUnknown)
	}
	if err != nil {
		return nil, err
	}
	return []byte(out), nil
}

// Calls returns the arguments of every command run so far, in order; a
// command blocked in OnRun is not yet in it.
func (r *Runner) Calls() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([][]string, len(r.calls))
	for i, c := range r.calls {
		out[i] = slices.Clone(c)
	}
	return out
}

// Count returns how many times subcommand ran (failed runs included).
func (r *Runner) Count(subcommand string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[subcommand]
}

// Total returns how many commands ran.
func (r *Runner) Total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

// MetadataFree is the named VG's vg_mda_free now; 0 for a VG it lacks.
func (r *Runner) MetadataFree(vg string) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if v := r.vg(vg); v != nil {
		return r.metadataFree(v)
	}
	return 0
}

// FailNext makes the next command of f.Subcommand fail, after the
// failures already queued for it.
func (r *Runner) FailNext(f Failure) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Failures = append(r.Failures, f)
}

// GetVG returns a copy of the VG named name.
func (r *Runner) GetVG(name string) (VG, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if vg := r.vg(name); vg != nil {
		return *vg, true
	}
	return VG{}, false
}

// GetPool returns a copy of the thin pool vg/name.
func (r *Runner) GetPool(vg, name string) (Pool, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.pool(vg, name); p != nil {
		return *p, true
	}
	return Pool{}, false
}

// GetLV returns a copy of the thin LV vg/name.
func (r *Runner) GetLV(vg, name string) (LV, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if lv := r.lv(vg, name); lv != nil {
		c := *lv
		c.Tags = slices.Clone(lv.Tags)
		return c, true
	}
	return LV{}, false
}

// ListLVs returns a copy of every thin LV, sorted by VG and name.
func (r *Runner) ListLVs() []LV {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]LV, len(r.LVs))
	for i, lv := range r.LVs {
		lv.Tags = slices.Clone(lv.Tags)
		out[i] = lv
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].VG != out[j].VG {
			return out[i].VG < out[j].VG
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// AddLV adds a thin LV, as something outside lvmd would.
func (r *Runner) AddLV(lv LV) {
	r.mu.Lock()
	defer r.mu.Unlock()
	lv.Tags = slices.Clone(lv.Tags)
	r.LVs = append(r.LVs, lv)
}

// AddVGAndPool adds a volume group and a thin pool in it, as an
// administrator would (vgcreate, lvcreate --thinpool).
func (r *Runner) AddVGAndPool(vg VG, pool Pool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.VGs = append(r.VGs, vg)
	r.Pools = append(r.Pools, pool)
}

// SetPoolUsage sets a thin pool's data and metadata use, in percent. It
// panics when there is no such pool: that is a broken test.
func (r *Runner) SetPoolUsage(vg, pool string, data, metadata float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pool(vg, pool)
	if p == nil {
		panic(fmt.Sprintf("fake lvm: no thin pool %s/%s", vg, pool))
	}
	p.DataPercent, p.MetadataPercent = data, metadata
}

// The lookups below are called with mu held.

func (r *Runner) vg(name string) *VG {
	for i := range r.VGs {
		if r.VGs[i].Name == name {
			return &r.VGs[i]
		}
	}
	return nil
}

func (r *Runner) pool(vg, name string) *Pool {
	for i := range r.Pools {
		if r.Pools[i].VG == vg && r.Pools[i].Name == name {
			return &r.Pools[i]
		}
	}
	return nil
}

func (r *Runner) lv(vg, name string) *LV {
	for i := range r.LVs {
		if r.LVs[i].VG == vg && r.LVs[i].Name == name {
			return &r.LVs[i]
		}
	}
	return nil
}

func extentSize(vg *VG) uint64 {
	if vg.ExtentSize == 0 {
		return DefaultExtentSize
	}
	return vg.ExtentSize
}

// uuid makes a new UUID in lvm's 6-4-4-4-4-4-6 layout.
func (r *Runner) uuid() string {
	r.nextID++
	s := fmt.Sprintf("%028d", r.nextID)
	return strings.Join([]string{"fake" + s[:2], s[2:6], s[6:10], s[10:14], s[14:18], s[18:22], s[22:28]}, "-")
}

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

// lookupVG returns the VG of a command, or lvm's error for a missing one.
func (r *Runner) lookupVG(c *command, name string) (*VG, error) {
	vg := r.vg(name)
	if vg == nil {
		return nil, c.fail("Volume group \"%s\" not found\n  Cannot process volume group %s", name, name)
	}
	return vg, nil
}

func (r *Runner) nameTaken(vg, name string) bool {
	return r.lv(vg, name) != nil || r.pool(vg, name) != nil
}

// poolFull is lvm2's refusal to add thin volumes to a full pool.
func poolFull(c *command, p *Pool) error {
	if p.DataPercent >= 100 || p.MetadataPercent >= 100 {
		return c.fail("Cannot create new thin volume, free space in thin pool %s/%s reached threshold.", p.VG, p.Name)
	}
	return nil
}

func (r *Runner) lvcreate(c *command) (string, error) {
	if err := c.parse(); err != nil {
		return "", err
	}
	if z, ok := c.value("--zero"); ok && z != "y" && z != "n" {
		return "", c.unsupported("--zero %q", z)
	}
	name, ok := c.value("--name")
	if !ok {
		return "", c.unsupported("lvcreate without --name")
	}
	if err := lvmname.ValidateLVName(name); err != nil {
		return "", c.fail("Logical volume name \"%s\" is invalid.", name)
	}
	tags := c.values["--addtag"]
	for _, t := range tags {
		if err := lvmname.ValidateTag(t); err != nil {
			return "", c.fail("Invalid tag %s.", t)
		}
	}
	vgName, from, err := c.target()
	if err != nil {
		return "", err
	}
	vg, err := r.lookupVG(c, vgName)
	if err != nil {
		return "", err
	}
	lv := LV{VG: vgName, Name: name, Tags: slices.Clone(tags)}
	switch {
	case c.bools["--thin"] && !c.bools["--snapshot"]:
		p := r.pool(vgName, from)
		if p == nil {
			return "", c.fail("Failed to find logical volume \"%s/%s\"", vgName, from)
		}
		size, err := c.bytesArg("--virtualsize")
		if err != nil {
			return "", err
		}
		if len(c.values["--activate"]) > 0 || len(c.values["--setactivationskip"]) > 0 || len(c.values["--permission"]) > 0 {
			return "", c.unsupported("activation or permission options for a thin LV")
		}
		if r.nameTaken(vgName, name) {
			return "", c.fail("Logical Volume \"%s\" already exists in volume group \"%s\"", name, vgName)
		}
		if err := poolFull(c, p); err != nil {
			return "", err
		}
		lv.Pool, lv.Size = p.Name, roundUp(size, extentSize(vg))
	case c.bools["--snapshot"] && !c.bools["--thin"]:
		src := r.lv(vgName, from)
		if src == nil {
			if r.pool(vgName, from) != nil {
				return "", c.unsupported("snapshot of thin pool %s/%s", vgName, from)
			}
			return "", c.fail("Failed to find logical volume \"%s/%s\"", vgName, from)
		}
		if _, ok := c.value("--size"); ok {
			return "", c.unsupported("--size for a thin snapshot")
		}
		if r.nameTaken(vgName, name) {
			return "", c.fail("Logical Volume \"%s\" already exists in volume group \"%s\"", name, vgName)
		}
		if err := poolFull(c, r.pool(vgName, src.Pool)); err != nil {
			return "", err
		}
		lv.Pool, lv.Origin, lv.Size = src.Pool, src.Name, src.Size
		lv.SkipActivation = true
		if v, ok := c.value("--setactivationskip"); ok {
			switch v {
			case "y":
			case "n":
				lv.SkipActivation = false
			default:
				return "", c.unsupported("--setactivationskip %q", v)
			}
		}
		activate := "y"
		if v, ok := c.value("--activate"); ok {
			activate = v
		}
		if activate != "y" && activate != "n" {
			return "", c.unsupported("--activate %q", activate)
		}
		// lvcreate activates by default, but activation skip wins.
		lv.Inactive = activate == "n" || lv.SkipActivation
		if v, ok := c.value("--permission"); ok {
			switch v {
			case "r":
				lv.ReadOnly = true
			case "rw":
			default:
				return "", c.unsupported("--permission %q", v)
			}
		}
	default:
		return "", c.unsupported("lvcreate without exactly one of --thin and --snapshot")
	}
	if err := r.writeMetadata(c, vg, lvMetadataBytes(&lv)); err != nil {
		return "", err
	}
	if err := r.backDevice(c, &lv); err != nil {
		return "", err
	}
	lv.UUID = r.uuid()
	r.thinID(&lv)
	r.LVs = append(r.LVs, lv)
	return fmt.Sprintf("  Logical volume \"%s\" created.\n", name), nil
}

func (r *Runner) lvextend(c *command) (string, error) {
	if err := c.parse(); err != nil {
		return "", err
	}
	vgName, name, err := c.target()
	if err != nil {
		return "", err
	}
	vg, err := r.lookupVG(c, vgName)
	if err != nil {
		return "", err
	}
	ext := extentSize(vg)
	if c.bools["--use-policies"] {
		return r.autoextend(c, vg, name)
	}
	size, err := c.bytesArg("--size")
	if err != nil {
		return "", err
	}
	if len(c.values["--config"]) > 0 {
		return "", c.unsupported("--config without --use-policies")
	}
	size = roundUp(size, ext)
	var cur *uint64
	p := r.pool(vgName, name)
	if p != nil {
		cur = &p.Size
	} else if lv := r.lv(vgName, name); lv != nil {
		cur = &lv.Size
	} else {
		return "", c.fail("Failed to find logical volume \"%s/%s\"", vgName, name)
	}
	newExt, curExt := size/ext, *cur/ext
	switch {
	case size == *cur:
		return "", c.fail("New size (%d extents) matches existing size (%d extents).", newExt, curExt)
	case size < *cur:
		return "", c.fail("New size given (%d extents) not larger than existing size (%d extents)", newExt, curExt)
	}
	if p != nil {
		return r.growPool(c, vg, p, size-p.Size)
	}
	if r.DevDir != "" {
		if err := os.Truncate(r.devicePath(vgName, name), int64(size)); err != nil {
			return "", c.fail("device of %s/%s: %v", vgName, name, err)
		}
	}
	*cur = size
	return fmt.Sprintf("  Size of logical volume %s/%s changed from %d extents to %d extents.\n  Logical volume %s/%s successfully resized.\n",
		vgName, name, curExt, newExt, vgName, name), nil
}

// autoextend is `lvextend --use-policies`: it grows a thin pool by the
// policy's percent when its use is at or over the policy's threshold.
func (r *Runner) autoextend(c *command, vg *VG, name string) (string, error) {
	if _, ok := c.value("--size"); ok {
		return "", c.unsupported("--size with --use-policies")
	}
	policy, ok := c.value("--config")
	if !ok {
		return "", c.unsupported("--use-policies without --config")
	}
	var threshold, percent int
	if _, err := fmt.Sscanf(policy, "activation{thin_pool_autoextend_threshold=%d thin_pool_autoextend_percent=%d}", &threshold, &percent); err != nil {
		return "", c.unsupported("--config %q", policy)
	}
	p := r.pool(vg.Name, name)
	if p == nil {
		if r.lv(vg.Name, name) != nil {
			return "", c.unsupported("--use-policies on thin LV %s/%s", vg.Name, name)
		}
		return "", c.fail("Failed to find logical volume \"%s/%s\"", vg.Name, name)
	}
	if threshold >= 100 || p.DataPercent < float64(threshold) && p.MetadataPercent < float64(threshold) {
		return "", nil // lvm2 does nothing and says nothing
	}
	return r.growPool(c, vg, p, roundUp(p.Size*uint64(percent)/100, extentSize(vg)))
}

// growPool takes by bytes from the VG's free space for a thin pool.
func (r *Runner) growPool(c *command, vg *VG, p *Pool, by uint64) (string, error) {
	ext := extentSize(vg)
	if by > vg.Free {
		return "", c.fail("Insufficient free space: %d extents needed, but only %d available", by/ext, vg.Free/ext)
	}
	old := p.Size
	p.Size += by
	vg.Free -= by
	scale := float64(old) / float64(p.Size)
	p.DataPercent *= scale
	p.MetadataPercent *= scale
	return fmt.Sprintf("  Size of logical volume %s/%s_tdata changed from %d extents to %d extents.\n  Logical volume %s/%s successfully resized.\n",
		vg.Name, p.Name, old/ext, p.Size/ext, vg.Name, p.Name), nil
}

// lvchange changes one thin LV's permission (--permission r|rw),
// activation (--activate y|n) or tags (--addtag, --deltag), one kind at a
// time.
func (r *Runner) lvchange(c *command) (string, error) {
	if err := c.parse(); err != nil {
		return "", err
	}
	vgName, name, err := c.target()
	if err != nil {
		return "", err
	}
	vg, err := r.lookupVG(c, vgName)
	if err != nil {
		return "", err
	}
	if ewf, ok := c.value("--errorwhenfull"); ok {
		return r.setErrorWhenFull(c, vgName, name, ewf)
	}
	lv := r.lv(vgName, name)
	if lv == nil {
		return "", c.fail("Failed to find logical volume \"%s/%s\"", vgName, name)
	}
	perm, hasPerm := c.value("--permission")
	act, hasAct := c.value("--activate")
	if add, del := c.values["--addtag"], c.values["--deltag"]; len(add) > 0 || len(del) > 0 {
		if hasPerm || hasAct {
			return "", c.unsupported("tag changes with other changes")
		}
		for _, t := range slices.Concat(add, del) {
			if err := lvmname.ValidateTag(t); err != nil {
				return "", c.fail("Invalid tag %s.", t)
			}
		}
		var grow uint64
		for _, t := range add {
			if !slices.Contains(lv.Tags, t) {
				grow += uint64(len(t)) + 4
			}
		}
		if err := r.writeMetadata(c, vg, grow); err != nil {
			return "", err
		}
		for _, t := range add {
			if !slices.Contains(lv.Tags, t) {
				lv.Tags = append(lv.Tags, t)
			}
		}
		lv.Tags = slices.DeleteFunc(lv.Tags, func(t string) bool { return slices.Contains(del, t) })
		return fmt.Sprintf("  Logical volume %s/%s changed.\n", vgName, name), nil
	}
	switch {
	case hasPerm && !hasAct:
		if perm != "r" && perm != "rw" {
			return "", c.unsupported("--permission %q", perm)
		}
		if lv.ReadOnly == (perm == "r") {
			return "", c.fail("Logical volume %s/%s is already %s.", vgName, name, map[bool]string{true: "read only", false: "writable"}[lv.ReadOnly])
		}
		lv.ReadOnly = perm == "r"
		return fmt.Sprintf("  Logical volume %s/%s changed.\n", vgName, name), nil
	case hasAct && !hasPerm:
		switch act {
		case "y":
			if lv.SkipActivation && !c.bools["--ignoreactivationskip"] {
				return "", nil // lvm skips it silently
			}
			lv.Inactive = false
		case "n":
			lv.Inactive = true
		default:
			return "", c.unsupported("--activate %q", act)
		}
		return "", nil
	}
	return "", c.unsupported("lvchange without exactly one of --permission and --activate")
}

// setErrorWhenFull is lvchange --errorwhenfull y|n of a thin pool.
func (r *Runner) setErrorWhenFull(c *command, vgName, name, v string) (string, error) {
	if len(c.values) != 1 {
		return "", c.unsupported("--errorwhenfull with other changes")
	}
	p := r.pool(vgName, name)
	if p == nil {
		if r.lv(vgName, name) != nil {
			return "", c.fail("Command on LV %s/%s uses options that require LV types thinpool.", vgName, name)
		}
		return "", c.fail("Failed to find logical volume \"%s/%s\"", vgName, name)
	}
	want := map[string]string{"y": "error", "n": "queue"}[v]
	if want == "" {
		return "", c.unsupported("--errorwhenfull %q", v)
	}
	p.WhenFull = want
	return fmt.Sprintf("  Logical volume %s/%s changed.\n", vgName, name), nil
}

func whenFull(p *Pool) string {
	if p.WhenFull == "" {
		return "queue"
	}
	return p.WhenFull
}

// SetPoolReadOnly makes a pool read-only, as the kernel does when its
// metadata fills, or writable again.
func (r *Runner) SetPoolReadOnly(vg, pool string, readOnly bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.pool(vg, pool); p != nil {
		p.ReadOnly = readOnly
	}
}

func (r *Runner) lvremove(c *command) (string, error) {
	if err := c.parse(); err != nil {
		return "", err
	}
	if !c.bools["--yes"] || !c.bools["--force"] {
		return "", c.unsupported("lvremove without --yes --force (it would prompt)")
	}
	vgName, name, err := c.target()
	if err != nil {
		return "", err
	}
	if _, err := r.lookupVG(c, vgName); err != nil {
		return "", err
	}
	if r.pool(vgName, name) != nil {
		return "", c.unsupported("removing thin pool %s/%s", vgName, name)
	}
	i := slices.IndexFunc(r.LVs, func(lv LV) bool { return lv.VG == vgName && lv.Name == name })
	if i < 0 {
		return "", c.fail("Failed to find logical volume \"%s/%s\"", vgName, name)
	}
	if r.DevDir != "" {
		if err := os.Remove(r.devicePath(vgName, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", c.fail("device of %s/%s: %v", vgName, name, err)
		}
	}
	r.LVs = slices.Delete(r.LVs, i, i+1)
	for j := range r.LVs {
		if r.LVs[j].VG == vgName && r.LVs[j].Origin == name {
			r.LVs[j].Origin = "" // thin snapshots outlive their origin
		}
	}
	return fmt.Sprintf("  Logical volume \"%s\" successfully removed.\n", name), nil
}

// devicePath is where an LV's device node is.
func devicePath(devDir, vg, name string) string {
	if devDir == "" {
		devDir = "/dev"
	}
	return filepath.Join(devDir, vg, name)
}

func (r *Runner) devicePath(vg, name string) string { return devicePath(r.DevDir, vg, name) }

// backDevice makes a new LV's backing file when DevDir is set: a copy of
// its origin's, or empty, of the LV's size.
func (r *Runner) backDevice(c *command, lv *LV) error {
	if r.DevDir == "" {
		return nil
	}
	var data []byte
	if lv.Origin != "" {
		var err error
		if data, err = os.ReadFile(r.devicePath(lv.VG, lv.Origin)); err != nil {
			return c.fail("device of origin %s/%s: %v", lv.VG, lv.Origin, err)
		}
	}
	path := r.devicePath(lv.VG, lv.Name)
	err := os.MkdirAll(filepath.Dir(path), 0o700)
	if err == nil {
		err = os.WriteFile(path, data, 0o600)
	}
	if err == nil {
		err = os.Truncate(path, int64(lv.Size))
	}
	if err != nil {
		return c.fail("device of %s/%s: %v", lv.VG, lv.Name, err)
	}
	return nil
}

// fullReport answers `lvm fullreport` with the sub-reports and fields its
// --configreport options ask for, one report per VG, as lvm2 prints them.
func (r *Runner) fullReport(c *command) (string, error) {
	fields := map[string][]string{}
	var vgNames []string
	var format, units string
	nosuffix := false
	section := ""
	for i := 1; i < len(c.args); i++ {
		a := c.args[i]
		next := func() (string, error) {
			if i+1 >= len(c.args) {
				return "", c.unsupported("%s without a value", a)
			}
			i++
			return c.args[i], nil
		}
		var v string
		var err error
		switch a {
		case "--reportformat":
			format, err = next()
		case "--units":
			units, err = next()
		case "--nosuffix":
			nosuffix = true
		case "--configreport":
			section, err = next()
			if err == nil && !slices.Contains([]string{"vg", "pv", "lv", "pvseg", "seg"}, section) {
				err = c.unsupported("report %q", section)
			}
		case "-o", "--options":
			v, err = next()
			fallthrough
		case "-o,": // -o with its value attached: no fields
			if a == "-o," {
				v = ","
			}
			if err == nil {
				if section == "" {
					err = c.unsupported("-o before --configreport")
				}
				fields[section] = nil
				for _, f := range strings.Split(v, ",") {
					if f != "" {
						fields[section] = append(fields[section], f)
					}
				}
			}
		default:
			if strings.HasPrefix(a, "-") {
				err = c.unsupported("option %q", a)
			}
			vgNames = append(vgNames, a)
		}
		if err != nil {
			return "", err
		}
	}
	if format != "json" || units != "b" || !nosuffix {
		return "", c.unsupported("report format: want --reportformat json --units b --nosuffix")
	}
	for _, sec := range []string{"vg", "pv", "lv", "pvseg", "seg"} {
		if _, ok := fields[sec]; !ok {
			return "", c.unsupported("fullreport without -o for %s: lvm would print its default fields", sec)
		}
	}
	if len(vgNames) == 0 {
		for _, vg := range r.VGs {
			vgNames = append(vgNames, vg.Name)
		}
		sort.Strings(vgNames)
	}
	var reports []string
	for _, name := range vgNames {
		vg, err := r.lookupVG(c, name)
		if err != nil {
			return "", err
		}
		rep, err := r.vgReport(c, vg, fields)
		if err != nil {
			return "", err
		}
		reports = append(reports, rep)
	}
	return "  {\n      \"report\": [\n" + strings.Join(reports, ",\n") + "\n      ]\n  }\n", nil
}

// row is one line of a report: a field's value by name.
type row func(field string) (string, bool)

func (r *Runner) vgReport(c *command, vg *VG, fields map[string][]string) (string, error) {
	if vg.UUID == "" {
		vg.UUID = r.uuid()
	}
	vgRow := func(f string) (string, bool) {
		switch f {
		case "vg_name":
			return vg.Name, true
		case "vg_uuid":
			return vg.UUID, true
		case "vg_size":
			return strconv.FormatUint(vg.Size, 10), true
		case "vg_free":
			return strconv.FormatUint(vg.Free, 10), true
		case "vg_extent_size":
			return strconv.FormatUint(extentSize(vg), 10), true
		case "vg_extent_count":
			return strconv.FormatUint(vg.Size/extentSize(vg), 10), true
		case "vg_free_count":
			return strconv.FormatUint(vg.Free/extentSize(vg), 10), true
		case "vg_mda_size":
			return strconv.FormatUint(metadataAreaSize(vg), 10), true
		case "vg_mda_free":
			return strconv.FormatUint(r.metadataFree(vg), 10), true
		}
		return "", false
	}
	type named struct {
		name string
		row  row
	}
	var lvs []named
	for i := range r.Pools {
		if p := &r.Pools[i]; p.VG == vg.Name {
			if p.UUID == "" {
				p.UUID = r.uuid()
			}
			lvs = append(lvs, named{p.Name, poolRow(p)})
		}
	}
	for i := range r.LVs {
		if lv := &r.LVs[i]; lv.VG == vg.Name {
			if lv.UUID == "" {
				lv.UUID = r.uuid()
			}
			lvs = append(lvs, named{lv.Name, lvRow(lv, r.DevDir)})
		}
	}
	sort.Slice(lvs, func(i, j int) bool { return lvs[i].name < lvs[j].name })
	lvRows := make([]row, len(lvs))
	for i, lv := range lvs {
		lvRows[i] = lv.row
	}
	none := func(string) (string, bool) { return "", false }
	sections := []struct {
		name string
		rows []row
	}{
		{"vg", []row{vgRow}},
		{"pv", []row{none}}, // one PV per VG
		{"lv", lvRows},
		{"pvseg", []row{none}},
		{"seg", lvRows},
	}
	var parts []string
	for _, s := range sections {
		var lines []string
		for _, rw := range s.rows {
			line, err := formatRow(c, s.name, fields[s.name], rw)
			if err != nil {
				return "", err
			}
			lines = append(lines, "                  "+line)
		}
		parts = append(parts, fmt.Sprintf("              %q: [\n%s\n              ]\n", s.name, strings.Join(lines, ",\n")))
	}
	return "          {\n" + strings.Join(parts, "              ,\n") + "          }", nil
}

func formatRow(c *command, section string, fields []string, rw row) (string, error) {
	kv := make([]string, 0, len(fields))
	for _, f := range fields {
		v, ok := rw(f)
		if !ok {
			if section == "seg" || section == "pv" || section == "pvseg" {
				return "", c.unsupported("field %q in the %s report", f, section)
			}
			return "", c.fail("Unrecognised field: %s", f)
		}
		k, _ := json.Marshal(f)
		q, _ := json.Marshal(v)
		kv = append(kv, string(k)+":"+string(q))
	}
	return "{" + strings.Join(kv, ", ") + "}", nil
}

func percent(p float64) string { return strconv.FormatFloat(p, 'f', 2, 64) }

func poolRow(p *Pool) row {
	return func(f string) (string, bool) {
		switch f {
		case "lv_uuid":
			return p.UUID, true
		case "lv_name":
			return p.Name, true
		case "lv_full_name":
			return p.VG + "/" + p.Name, true
		case "lv_path", "lv_tags", "origin", "pool_lv", "thin_id":
			return "", true
		case "chunk_size":
			return strconv.FormatUint(chunkSize(p), 10), true
		case "lv_size":
			return strconv.FormatUint(p.Size, 10), true
		case "lv_attr":
			switch {
			case p.Inactive:
				return "twi---tz--", true
			case p.ReadOnly:
				return "twi-aotzM-", true
			case p.DataPercent >= 100:
				return "twi-aotzD-", true
			}
			return "twi-aotz--", true
		case "lv_when_full":
			return whenFull(p), true
		case "vg_name":
			return p.VG, true
		case "data_percent", "metadata_percent":
			if p.Inactive {
				return "", true
			}
			if f == "data_percent" {
				return percent(p.DataPercent), true
			}
			return percent(p.MetadataPercent), true
		}
		return "", false
	}
}

func lvRow(lv *LV, devDir string) row {
	return func(f string) (string, bool) {
		switch f {
		case "lv_uuid":
			return lv.UUID, true
		case "lv_name":
			return lv.Name, true
		case "lv_full_name":
			return lv.VG + "/" + lv.Name, true
		case "lv_path":
			return devicePath(devDir, lv.VG, lv.Name), true
		case "lv_size":
			return strconv.FormatUint(lv.Size, 10), true
		case "lv_attr":
			return attr(lv), true
		case "lv_tags":
			return strings.Join(lv.Tags, ","), true
		case "origin":
			return lv.Origin, true
		case "pool_lv":
			return lv.Pool, true
		case "vg_name":
			return lv.VG, true
		case "data_percent":
			if lv.Inactive {
				return "", true
			}
			return percent(lv.DataPercent), true
		case "metadata_percent", "lv_when_full":
			return "", true
		case "thin_id":
			return strconv.FormatUint(uint64(lv.ThinID), 10), true
		case "chunk_size":
			return "0", true
		}
		return "", false
	}
}

// DefaultChunkSize is the block size of a pool whose ChunkSize is 0:
// lvm2's default for a small pool, 64 KiB.
const DefaultChunkSize = 64 << 10

func chunkSize(p *Pool) uint64 {
	if p.ChunkSize == 0 {
		return DefaultChunkSize
	}
	return p.ChunkSize
}

// thinID gives lv a thin id when it has none: one above the VG's highest,
// as lvm numbers them.
func (r *Runner) thinID(lv *LV) uint32 {
	if lv.ThinID == 0 {
		var top uint32
		for _, o := range r.LVs {
			if o.VG == lv.VG && o.ThinID > top {
				top = o.ThinID
			}
		}
		lv.ThinID = top + 1
	}
	return lv.ThinID
}

// attr is a thin LV's lv_attr, e.g. "Vwi-a-tz--", "Vri---tz-k".
func attr(lv *LV) string {
	a := []byte("Vwi-a-tz--")
	if lv.ReadOnly {
		a[1] = 'r'
	}
	if lv.Inactive {
		a[4] = '-'
	}
	if lv.SkipActivation {
		a[9] = 'k'
	}
	return string(a)
}
