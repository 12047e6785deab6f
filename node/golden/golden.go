package golden

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	pb "github.com/thinlvm/thinlvm/lvmd/proto"
	"github.com/thinlvm/thinlvm/node/diskimage"
	"github.com/thinlvm/thinlvm/node/jobs"
	"github.com/thinlvm/thinlvm/node/lvmd"
	"github.com/thinlvm/thinlvm/node/transfer"
)

// Reconciler keeps its node's golden bases: one per GoldenImage that a
// LogicalVolume on the node is waiting for or whose prewarm selector
// matches the node, each populated once, sealed read-only and inactive, and
// removed when its GoldenImage is gone. Requests are GoldenImage names.
type Reconciler struct {
	Client client.Client
	// APIReader reads LVMNodes past the cache for read-modify-write.
	APIReader client.Reader
	LVMD      lvmd.Client
	NodeName  string
	Writer    *diskimage.Writer
	Recorder  events.EventRecorder
	// RetryAfter is the first wait after a failed population; it doubles
	// up to 16 times as much. Default 30s.
	RetryAfter time.Duration
	// ProgressInterval is the least time between two progress writes to
	// the LVMNode; default 2s.
	ProgressInterval time.Duration
	// Metrics, when set, counts the populations.
	Metrics *Metrics
	// Copier copies bases from the nodes that hold them Ready; nil turns
	// copies from peers off (every node downloads from the origin).
	Copier *transfer.Copier
	// Namespace holds the Leases that let one node at a time download an
	// image from its origin (the agent's own namespace).
	Namespace string
	// WaitInterval is how often a population that waits (for a peer, for
	// the node downloading from the origin, for the source volume) looks
	// again; default 3s.
	WaitInterval time.Duration
	// LeaseDuration is how long a download from the origin holds the
	// image's Lease without renewing it; default 30s.
	LeaseDuration time.Duration

	mu sync.Mutex
	// pops are the running populations, by GoldenImage name; mu orders
	// a population's end (pops and failures together) against Reconcile.
	pops     jobs.Set[*population]
	failures map[string]*failure
	wake     chan event.GenericEvent
	statusMu sync.Mutex
}

// population is one running population of a base (a job of pops).
type population struct {
	uid  types.UID
	prog diskimage.Progress

	mu   sync.Mutex
	src  string // where the data comes from: origin, volume, or a peer
	wait string // what it waits for, while it does
}

func (p *population) from() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.src
}

func (p *population) waiting() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.wait
}

func (p *population) set(from, waiting string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.src, p.wait = from, waiting
}

// failure is the last failed population of an image.
type failure struct {
	uid   types.UID
	err   error
	at    time.Time
	count int
}

// +kubebuilder:rbac:groups=thinlvm.io,resources=goldenimages,verbs=get;list;watch
// +kubebuilder:rbac:groups=thinlvm.io,resources=lvmnodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=thinlvm.io,resources=lvmnodes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;create;update;delete,namespace=thinlvm-system

// SetupWithManager registers the reconciler, and a start-up sweep that
// finds bases whose GoldenImage was deleted while the agent was down.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.failures = map[string]*failure{}
	r.wake = make(chan event.GenericEvent, 64)
	imageOf := func(_ context.Context, o client.Object) []reconcile.Request {
		lv, ok := o.(*thinlvmv1.LogicalVolume)
		if !ok || lv.Spec.NodeName != r.NodeName || lv.Spec.Source == nil || lv.Spec.Source.Kind != thinlvmv1.SourceGoldenImage {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: lv.Spec.Source.Name}}}
	}
	prewarmed := func(ctx context.Context, o client.Object) []reconcile.Request {
		if o.GetName() != r.NodeName {
			return nil
		}
		list := &thinlvmv1.GoldenImageList{}
		if err := r.Client.List(ctx, list); err != nil {
			log.FromContext(ctx).Error(err, "list GoldenImages")
			return nil
		}
		var reqs []reconcile.Request
		for _, gi := range list.Items {
			if gi.Spec.Prewarm != nil {
				reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: gi.Name}})
			}
		}
		return reqs
	}
	if err := mgr.Add(manager.RunnableFunc(r.sweep)); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("goldenbase").
		For(&thinlvmv1.GoldenImage{}).
		Watches(&thinlvmv1.LogicalVolume{}, handler.EnqueueRequestsFromMapFunc(imageOf)).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(prewarmed)).
		WatchesRawSource(source.Channel(r.wake, &handler.EnqueueRequestForObject{})).
		Complete(r)
}

// sweep enqueues the image of every base lvmd holds once at start: a base
// whose GoldenImage is gone is removed, one left half-written by a killed
// agent is made again.
func (r *Reconciler) sweep(ctx context.Context) error {
	for ctx.Err() == nil {
		resp, err := r.LVMD.ListLVs(ctx, &pb.ListLVsRequest{})
		if err == nil {
			for _, name := range baseImages(resp.GetVolumes()) {
				r.poke(name)
			}
			return nil
		}
		log.FromContext(ctx).Info("list bases failed; retrying", "error", err.Error())
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
	}
	return nil
}

// baseImages are the GoldenImage names of the bases among vols.
func baseImages(vols []*pb.LogicalVolume) []string {
	var out []string
	for _, v := range vols {
		if name, ok := baseImage(v); ok {
			out = append(out, name)
		}
	}
	return out
}

func baseImage(v *pb.LogicalVolume) (string, bool) {
	for _, t := range v.GetTags() {
		if name, ok := strings.CutPrefix(t, thinlvmv1.BaseTagPrefix); ok {
			return name, true
		}
	}
	return "", false
}

func (r *Reconciler) poke(image string) {
	gi := &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: image}}
	select {
	case r.wake <- event.GenericEvent{Object: gi}:
	default: // full: a reconcile is due anyway
	}
}

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	name := req.Name
	gi := &thinlvmv1.GoldenImage{}
	err := r.Client.Get(ctx, req.NamespacedName, gi)
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	// A GoldenImage that a channel still points at stays usable while it
	// is Terminating: its finalizer holds it, and so does its base here.
	gone := apierrors.IsNotFound(err) || !gi.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(gi, thinlvmv1.GoldenImageChannelFinalizer)
	r.mu.Lock()
	if j := r.pops.Get(name); j != nil && (gone || j.State.uid != gi.UID) {
		j.Cancel() // its end wakes this reconciler again
		r.mu.Unlock()
		return ctrl.Result{}, nil
	}
	r.mu.Unlock()
	bases, err := r.bases(ctx, name)
	if err != nil {
		return ctrl.Result{}, err
	}
	if gone {
		return ctrl.Result{}, r.removeAll(ctx, name, bases, nil)
	}
	want := thinlvmv1.BaseLVName(gi)
	// A base of an earlier GoldenImage of the same name is stale.
	var current *pb.LogicalVolume
	var stale []*pb.LogicalVolume
	for _, b := range bases {
		if b.GetName() == want {
			current = b
		} else {
			stale = append(stale, b)
		}
	}
	if err := r.removeAll(ctx, name, stale, gi); err != nil {
		return ctrl.Result{}, err
	}

	r.mu.Lock()
	pop := r.pops.Get(name)
	fail := r.failures[name]
	r.mu.Unlock()
	switch {
	case pop != nil && pop.State.uid == gi.UID:
		return ctrl.Result{}, nil // running; it reports its progress
	case current != nil && current.GetReadOnly():
		return ctrl.Result{}, r.ready(ctx, gi, current)
	}
	needed, err := r.needed(ctx, gi)
	if err != nil {
		return ctrl.Result{}, err
	}
	if current != nil {
		// Writable and nobody writing it: a population was cut off.
		// Thin LVs read zeros only when new, so it is made again.
		log.FromContext(ctx).Info("removing a base left half-written", "goldenImage", klog.KRef("", name), "lv", current.GetName())
		if err := r.removeAll(ctx, name, []*pb.LogicalVolume{current}, gi); err != nil {
			return ctrl.Result{}, err
		}
	}
	if !needed {
		if fail != nil && fail.uid == gi.UID {
			r.mu.Lock()
			delete(r.failures, name)
			r.mu.Unlock()
		}
		return ctrl.Result{}, r.setBase(ctx, name, nil)
	}
	if fail != nil && fail.uid == gi.UID {
		if wait := r.backoff(fail) - time.Since(fail.at); wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, r.setBase(ctx, name, &thinlvmv1.GoldenBaseStatus{Name: name, LV: want,
				DeviceClass: gi.Spec.DeviceClass, Size: gi.BaseSize(), State: thinlvmv1.GoldenBaseFailed, Message: fail.err.Error()})
		}
	}
	r.start(ctx, gi)
	return ctrl.Result{}, nil
}

func (r *Reconciler) backoff(f *failure) time.Duration {
	d := r.RetryAfter
	if d <= 0 {
		d = 30 * time.Second
	}
	return d << min(f.count-1, 4)
}

// bases are the LVs lvmd holds for the image name.
func (r *Reconciler) bases(ctx context.Context, name string) ([]*pb.LogicalVolume, error) {
	resp, err := r.LVMD.ListLVs(ctx, &pb.ListLVsRequest{Tag: thinlvmv1.BaseTagPrefix + name})
	if err != nil {
		return nil, fmt.Errorf("list bases of %s: %w", name, err)
	}
	var out []*pb.LogicalVolume
	for _, v := range resp.GetVolumes() {
		if img, ok := baseImage(v); ok && img == name { // never anything else, whatever lvmd answers
			out = append(out, v)
		}
	}
	return out, nil
}

// removeAll removes bases. Volumes made from a base are thin snapshots,
// which outlive it, so nothing else needs to wait.
func (r *Reconciler) removeAll(ctx context.Context, name string, bases []*pb.LogicalVolume, gi *thinlvmv1.GoldenImage) error {
	for _, b := range bases {
		if _, err := r.LVMD.RemoveLV(ctx, &pb.RemoveLVRequest{Name: b.GetName(), DeviceClass: b.GetDeviceClass()}); err != nil && status.Code(err) != codes.NotFound {
			return fmt.Errorf("remove base %s of %s: %w", b.GetName(), name, err)
		}
		log.FromContext(ctx).Info("golden base removed", "goldenImage", klog.KRef("", name), "lv", b.GetName())
	}
	if gi == nil {
		r.mu.Lock()
		delete(r.failures, name)
		r.mu.Unlock()
		return r.setBase(ctx, name, nil)
	}
	return nil
}

// needed tells whether the node must hold the image's base: a
// LogicalVolume here is being made from it, its prewarm selector matches
// the node, or it is taken from a volume on this node.
func (r *Reconciler) needed(ctx context.Context, gi *thinlvmv1.GoldenImage) (bool, error) {
	// An image taken from a volume is made first on the volume's node,
	// where it costs nothing, and copied from there.
	if sv := gi.Status.SourceVolume; gi.Spec.Source.FromVolume() && sv != nil && sv.NodeName == r.NodeName {
		return true, nil
	}
	if p := gi.Spec.Prewarm; p != nil {
		sel, err := metav1.LabelSelectorAsSelector(&p.NodeSelector)
		if err != nil {
			return false, reconcile.TerminalError(fmt.Errorf("prewarm node selector: %w", err))
		}
		node := &corev1.Node{}
		if err := r.Client.Get(ctx, types.NamespacedName{Name: r.NodeName}, node); err != nil {
			return false, fmt.Errorf("get node %s: %w", r.NodeName, err)
		}
		if sel.Matches(labels.Set(node.Labels)) {
			return true, nil
		}
	}
	lvs := &thinlvmv1.LogicalVolumeList{}
	if err := r.Client.List(ctx, lvs); err != nil {
		return false, err
	}
	for _, lv := range lvs.Items {
		if lv.Spec.NodeName == r.NodeName && lv.Spec.Source != nil && lv.Spec.Source.Kind == thinlvmv1.SourceGoldenImage &&
			lv.Spec.Source.Name == gi.Name && lv.DeletionTimestamp.IsZero() && !meta.IsStatusConditionTrue(lv.Status.Conditions, thinlvmv1.ConditionReady) {
			return true, nil
		}
	}
	return false, nil
}

// ready reports a sealed base, deactivating it if it is active (after a
// reboot, say).
func (r *Reconciler) ready(ctx context.Context, gi *thinlvmv1.GoldenImage, base *pb.LogicalVolume) error {
	if base.GetActive() {
		if _, err := r.LVMD.ChangeLV(ctx, &pb.ChangeLVRequest{Name: base.GetName(), DeviceClass: base.GetDeviceClass(), Active: new(false)}); err != nil {
			return fmt.Errorf("deactivate base %s: %w", base.GetName(), err)
		}
	}
	r.mu.Lock()
	delete(r.failures, gi.Name)
	r.mu.Unlock()
	from, sum := sealedTags(base)
	return r.setBase(ctx, gi.Name, &thinlvmv1.GoldenBaseStatus{Name: gi.Name, LV: base.GetName(), DeviceClass: base.GetDeviceClass(),
		Size: *resource.NewQuantity(int64(base.GetSizeBytes()), resource.BinarySI), State: thinlvmv1.GoldenBaseReady, From: from, ContentSHA256: sum})
}

// start runs the image's population in the background; its end wakes the
// reconciler.
func (r *Reconciler) start(ctx context.Context, gi *thinlvmv1.GoldenImage) {
	logger := log.FromContext(ctx).WithValues("image", gi.Name)
	// The population outlives the reconcile, not the agent, and stops
	// when its GoldenImage goes.
	ctx = log.IntoContext(ctx, logger)
	gi = gi.DeepCopy()
	begin := time.Now()
	var n int64
	r.pops.Start(ctx, gi.Name, &population{uid: gi.UID}, func(ctx context.Context, j *jobs.Job[*population]) (err error) {
		n, err = r.populate(ctx, gi, j.State)
		return err
	}, func(j *jobs.Job[*population]) {
		err, pop := j.Err(), j.State
		r.mu.Lock()
		r.pops.Forget(gi.Name, j)
		if err != nil {
			f := r.failures[gi.Name]
			if f == nil || f.uid != gi.UID {
				f = &failure{uid: gi.UID}
				r.failures[gi.Name] = f
			}
			f.err, f.at = err, time.Now()
			f.count++
		}
		r.mu.Unlock()
		r.Metrics.observe(begin, err)
		if err == nil {
			r.Metrics.made(pop.from())
		}
		if err != nil {
			logger.Error(err, "golden base population failed")
			r.event(gi, corev1.EventTypeWarning, "PopulationFailed", "node %s: %v", r.NodeName, err)
		} else {
			logger.Info("golden base populated", "bytes", n, "seconds", time.Since(begin).Seconds(), "from", pop.from())
			r.event(gi, corev1.EventTypeNormal, "Populated", "node %s: base populated with %d bytes from %s in %s", r.NodeName, n, pop.from(), time.Since(begin).Round(time.Millisecond))
		}
		r.poke(gi.Name)
	})
}

// populate makes the base from the first source that can serve it (see
// sources.go), reporting its progress in the LVMNode meanwhile.
func (r *Reconciler) populate(ctx context.Context, gi *thinlvmv1.GoldenImage, pop *population) (int64, error) {
	name := gi.Name
	st := func(state thinlvmv1.GoldenBaseState) *thinlvmv1.GoldenBaseStatus {
		return &thinlvmv1.GoldenBaseStatus{Name: name, LV: thinlvmv1.BaseLVName(gi), DeviceClass: gi.Spec.DeviceClass, Size: gi.BaseSize(), State: state,
			BytesDone: pop.prog.Done.Load(), BytesTotal: pop.prog.Total.Load(), From: pop.from(), Message: pop.waiting()}
	}
	if err := r.setBase(ctx, name, st(thinlvmv1.GoldenBasePopulating)); err != nil {
		return 0, err
	}
	r.event(gi, corev1.EventTypeNormal, "Populating", "node %s: populating base %s from %s", r.NodeName, thinlvmv1.BaseLVName(gi), diskimage.SourceName(&gi.Spec.Source))
	done := make(chan struct{})
	defer close(done)
	go func() { // progress
		t := time.NewTicker(r.progressInterval())
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if err := r.setBase(ctx, name, st(thinlvmv1.GoldenBasePopulating)); err != nil {
					log.FromContext(ctx).Info("progress not written", "error", err.Error())
				}
			}
		}
	}()
	return r.fill(ctx, gi, pop)
}

func (r *Reconciler) progressInterval() time.Duration {
	if r.ProgressInterval > 0 {
		return r.ProgressInterval
	}
	return 2 * time.Second
}

func (r *Reconciler) event(gi *thinlvmv1.GoldenImage, kind, reason, format string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(gi, nil, kind, reason, "Populate", format, args...)
	}
}

// setBase writes one image's entry of the LVMNode's golden bases: st, or
// none when st is nil. It reads the LVMNode past the cache and patches with
// its resourceVersion, so that entries of other images written a moment
// ago are kept.
func (r *Reconciler) setBase(ctx context.Context, name string, st *thinlvmv1.GoldenBaseStatus) error {
	r.statusMu.Lock()
	defer r.statusMu.Unlock()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ln := &thinlvmv1.LVMNode{}
		if err := r.APIReader.Get(ctx, types.NamespacedName{Name: r.NodeName}, ln); err != nil {
			if apierrors.IsNotFound(err) && st == nil {
				return nil
			}
			return fmt.Errorf("get LVMNode %s: %w", r.NodeName, err)
		}
		patch := client.MergeFromWithOptions(ln.DeepCopy(), client.MergeFromWithOptimisticLock{})
		bases := ln.Status.GoldenBases[:0:0]
		found := false
		for _, b := range ln.Status.GoldenBases {
			if b.Name != name {
				bases = append(bases, b)
				continue
			}
			found = true
			if st != nil {
				if sameBase(b, *st) {
					return nil
				}
				bases = append(bases, *st)
			}
		}
		if !found {
			if st == nil {
				return nil
			}
			bases = append(bases, *st)
		}
		ln.Status.GoldenBases = bases
		if err := r.Client.Status().Patch(ctx, ln, patch); err != nil {
			return err
		}
		return nil
	})
}

func sameBase(a, b thinlvmv1.GoldenBaseStatus) bool {
	return a.Name == b.Name && a.LV == b.LV && a.DeviceClass == b.DeviceClass && a.Size.Cmp(b.Size) == 0 && a.State == b.State &&
		a.BytesDone == b.BytesDone && a.BytesTotal == b.BytesTotal && a.Message == b.Message && a.From == b.From && a.ContentSHA256 == b.ContentSHA256
}
