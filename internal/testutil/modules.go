package testutil

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// PinnedModuleDir is the directory, in the module cache, of module at the
// version the tools module hack/tools/<tool> pins (downloading it when
// missing). root is the repository's root, relative to the test's package
// directory: the third-party CRDs the tests install come from there.
func PinnedModuleDir(t testing.TB, root, tool, module string) string {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", module)
	cmd.Dir = filepath.Join(root, "hack", "tools", tool)
	cmd.Env = append(cmd.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod download %s: %v", module, err)
	}
	var m struct{ Dir, Error string }
	if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
		t.Fatalf("go mod download %s: %s (%v)", module, out, err)
	}
	return m.Dir
}

// GatewayAPICRDs are the standard-channel CRD files of the kinds the
// operator uses and the Gateways they attach to, from the
// sigs.k8s.io/gateway-api module go.mod requires.
func GatewayAPICRDs() ([]string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api").Output()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "standard")
	var paths []string
	for _, kind := range []string{"gatewayclasses", "gateways", "httproutes", "referencegrants"} {
		paths = append(paths, filepath.Join(dir, "gateway.networking.k8s.io_"+kind+".yaml"))
	}
	return paths, nil
}
