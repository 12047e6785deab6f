package chaos_test

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/e2e/cluster"
	"github.com/thinlvm/thinlvm/e2e/imageserver"
)

var (
	tb  *cluster.Testbed
	ctx = context.Background()

	seed = flag.Int64("chaos.seed", 0, "the storm's seed (0: a new one, printed)")
	// goldenSum is the SHA-256 of the golden image's first dataBytes.
	goldenSum string
)

// TestMain starts the test bed (two simulated nodes and the VM node) and a
// GoldenImage served from this machine, with a StorageClass of VM disks
// from it.
func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	start, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	var err error
	tb, err = cluster.StartTestbed(start, cluster.TestbedOptions{Log: os.Stderr, Nodes: []string{"node-a", "node-b"}, VMDisk: "24G", Pool: "16G"})
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		return 1
	}
	defer tb.Stop()
	srv, err := golden(start)
	if err != nil {
		tb.DumpLogs(os.Stderr)
		fmt.Fprintf(os.Stderr, "FAIL: golden image: %v\n", err)
		return 1
	}
	defer srv.Close()
	code := m.Run()
	if code != 0 {
		tb.DumpLogs(os.Stderr)
	}
	return code
}

// golden serves a 32 MiB raw image (4 MiB of data, then zeros) to the VM
// and makes its GoldenImage and StorageClass.
func golden(ctx context.Context) (*imageserver.Server, error) {
	img := make([]byte, 32<<20)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range dataBytes {
		img[i] = byte(r.Uint32())
	}
	goldenSum = sum(img[:dataBytes])
	srv := imageserver.New()
	gi := &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: "chaos-image"}, Spec: thinlvmv1.GoldenImageSpec{
		Source: thinlvmv1.ImageSource{HTTP: &thinlvmv1.HTTPSource{URL: srv.Add("/image.raw", img), SHA256: sum(img)}},
		Format: thinlvmv1.FormatRaw, Size: resource.MustParse("32Mi")}}
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: goldenClass}, Provisioner: thinlvmv1.DriverName,
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer), AllowVolumeExpansion: ptr.To(true),
		ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimDelete), Parameters: map[string]string{thinlvmv1.GoldenImageParameter: gi.Name}}
	if err := tb.Client.Create(ctx, gi); err != nil {
		srv.Close()
		return nil, err
	}
	if err := tb.Client.Create(ctx, sc); err != nil {
		srv.Close()
		return nil, err
	}
	if err := tb.WaitCapacityFor(ctx, cluster.VMNode, goldenClass); err != nil {
		srv.Close()
		return nil, err
	}
	return srv, nil
}

// newStorm makes a storm of size sz with the -chaos.seed seed or a new one.
func newStorm(t testing.TB, sz size) *storm {
	sd := *seed
	if sd == 0 {
		sd = time.Now().UnixNano() % 1_000_000
	}
	t.Logf("storm seed %d (replay: go test ./e2e/chaos/ -chaos.seed=%d)", sd, sd)
	return &storm{t: t, sz: sz, plan: newPlan(sd, sz), log: os.Stderr, vols: map[string]*vol{}, snaps: map[string]*snap{}}
}

// TestStorm is the CI size: every component killed at least twice, the
// control plane restarted once, and at least 60 operations.
func TestStorm(t *testing.T) {
	newStorm(t, size{ops: 60, workers: 4, rounds: 2, keepers: 4, pause: 12 * time.Second, opTimeout: 5 * time.Minute, opPause: 4 * time.Second}).run()
}

// BenchmarkStorm is the large storm (make bench): at least 200
// operations, six at a time, every component killed at least three times,
// a kill every 2.5-10 s after the last one's recovery.
func BenchmarkStorm(b *testing.B) {
	for range b.N {
		newStorm(b, size{ops: 200, workers: 6, rounds: 3, keepers: 6, pause: 10 * time.Second, opTimeout: 5 * time.Minute, opPause: 2 * time.Second}).run()
	}
}

// reservations is the sum of thinlvm_scheduler_reservations over the
// thinlvm scheduler's replicas; a replica that does not serve the metric
// fails the test.
func reservations(t testing.TB) int {
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // self-signed, on 127.0.0.1
	total, replicas := 0, 0
	for _, p := range tb.Procs() {
		if !strings.HasPrefix(p, "thinlvm-scheduler@") {
			continue
		}
		port := ""
		for _, a := range tb.Args(p) {
			if v, ok := strings.CutPrefix(a, "--secure-port="); ok {
				port = v
			}
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://127.0.0.1:"+port+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+tb.Config.BearerToken)
		req.Header.Set("Accept", "text/plain")
		resp, err := hc.Do(req)
		if err != nil {
			t.Errorf("metrics of %s: %v", p, err)
			continue
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := parser.TextToMetricFamilies(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Errorf("metrics of %s (HTTP %d): %v", p, resp.StatusCode, err)
			continue
		}
		fam := fams["thinlvm_scheduler_reservations"]
		if fam == nil || len(fam.GetMetric()) != 1 {
			t.Errorf("%s serves no thinlvm_scheduler_reservations (HTTP %d)", p, resp.StatusCode)
			continue
		}
		total += int(fam.GetMetric()[0].GetGauge().GetValue())
		replicas++
	}
	if replicas == 0 {
		t.Error("no thinlvm scheduler replica to ask for its reservations")
	}
	return total
}
