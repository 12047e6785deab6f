package reconciler_test

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"

	"k8s.io/client-go/rest"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"
)

// snapshotClientModule holds the VolumeSnapshot CRDs; the e2e cluster's
// snapshotter module pins its version.
const snapshotClientModule = "github.com/kubernetes-csi/external-snapshotter/client/v8"

// installSnapshotCRDs installs the snapshot.storage.k8s.io CRDs of the
// external-snapshotter client module that e2e/cluster/addons
// builds the snapshotter from (the e2e cluster installs the same), taken
// from the module cache (downloaded there if missing).
func installSnapshotCRDs(cfg *rest.Config) error {
	cmd := exec.Command("go", "mod", "download", "-json", snapshotClientModule)
	cmd.Dir = filepath.Join("..", "..", "e2e", "cluster", "addons")
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("locate module %s: %w", snapshotClientModule, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		return fmt.Errorf("locate module %s: no directory in %q (%w)", snapshotClientModule, out, err)
	}
	dir := filepath.Join(mod.Dir, "config", "crd")
	if _, err := crenvtest.InstallCRDs(cfg, crenvtest.CRDInstallOptions{ErrorIfPathMissing: true, Paths: []string{
		filepath.Join(dir, "snapshot.storage.k8s.io_volumesnapshots.yaml"),
		filepath.Join(dir, "snapshot.storage.k8s.io_volumesnapshotcontents.yaml"),
	}}); err != nil {
		return fmt.Errorf("install the VolumeSnapshot CRDs: %w", err)
	}
	return nil
}
