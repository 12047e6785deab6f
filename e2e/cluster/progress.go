package cluster

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// Progress is what Start is doing, for a caller that shows it (the demo's
// spinner line).
type Progress struct {
	// Step is what runs now, e.g. "building kube-apiserver".
	Step string
	// N of Of number the component being built: the Kubernetes binaries
	// in build.sh's order, then thinlvm's. Both are 0 for a step that
	// builds nothing.
	N, Of int
	// Since is when the step began.
	Since time.Time
}

// buildComponents is how many components Build counts: the Kubernetes
// binaries, then thinlvm's own as one.
var buildComponents = len(k8sBinaries) + 1

// buildStep reads one line of build.sh's stderr. A binary's build starts
// with "build: NAME (PACKAGE) into DIR ..." (build.sh prints nothing for
// a cached one); every other line is no step.
func buildStep(line string, now time.Time) (Progress, bool) {
	rest, ok := strings.CutPrefix(line, "build: ")
	if !ok || !strings.HasSuffix(rest, " ...") {
		return Progress{}, false
	}
	name, _, ok := strings.Cut(rest, " (")
	if !ok || name == "" || strings.Contains(name, " ") {
		return Progress{}, false
	}
	p := Progress{Step: "building " + name, Since: now}
	if i := slices.Index(k8sBinaries, name); i >= 0 {
		p.N, p.Of = i+1, buildComponents
	}
	return p, true
}

// buildLog passes build.sh's stderr on to log unchanged and reports each
// binary build.sh starts to build.
type buildLog struct {
	log      io.Writer
	progress func(Progress)
	partial  []byte // a line not ended yet
}

func (w *buildLog) Write(b []byte) (int, error) {
	n, err := w.log.Write(b)
	w.partial = append(w.partial, b...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		if p, ok := buildStep(string(w.partial[:i]), time.Now()); ok {
			w.progress(p)
		}
		w.partial = w.partial[i+1:]
	}
	return n, err
}

var setLoggerOnce sync.Once

// setLogger gives controller-runtime, whose client the harness uses, a
// logger writing to the harness's log (io.Discard: none). Without one,
// controller-runtime prints a stack trace ("log.SetLogger(...) was never
// called") to stderr when it is first used more than 30 s after the
// process started, as Start's client is after a build. The first Start's
// log wins.
func setLogger(log io.Writer) {
	setLoggerOnce.Do(func() {
		l := logr.Discard()
		if log != io.Discard {
			l = funcr.New(func(prefix, args string) {
				fmt.Fprintln(log, strings.TrimSpace("controller-runtime: "+prefix+" "+args))
			}, funcr.Options{})
		}
		ctrllog.SetLogger(l)
	})
}
