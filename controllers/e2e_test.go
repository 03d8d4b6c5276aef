package controllers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/api/v1alpha1"
	"github.com/storybus/storybus/bus/auth"
	"github.com/storybus/storybus/config/samples"
	"github.com/storybus/storybus/internal/kubelet"
	"github.com/storybus/storybus/internal/testutil"
)

// TestEndToEnd applies config/samples to the API server, lets the operator
// (the suite's manager, in this process) reconcile them, and then runs the
// bus exactly as the rendered StatefulSet's pod spec says: its command,
// args and env, with its volumes written as kubelet writes them. The test
// plays kubelet and the container runtime, with this mapping:
//
//   - the container's command "storybus" is the binary built from
//     ./cmd/storybus (the image's entrypoint);
//   - every volumeMount's mountPath P is the directory <root>/P on this
//     machine. ConfigMap, Secret and projected volumes are read from the API
//     server and written with kubelet's "..data" symlink layout, and written
//     again (one atomic swap) whenever the test says kubelet would; emptyDir
//     and volumeClaimTemplates volumes are empty directories;
//   - an absolute path in the args or in a mounted file that lies under a
//     mountPath P becomes <root>/P/…, as the container's mount namespace
//     would resolve it; TMPDIR points at the /tmp mount;
//   - each containerPort is a free loopback port, and an arg ":<port>"
//     listens there, as a port-forward would reach it;
//   - an env var from the downward API's metadata.name is the pod's name,
//     <statefulset>-0, and $(VAR) in an arg is expanded from the env.
//
// Then: the sample message is accepted with the sample credentials; a Grant
// narrowed by the user refuses it within seconds of the ConfigMap reaching
// the pod; and rotated credentials revoke the old token while a token from
// the new secret in the Secret works.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the storybus binary")
	}
	ns := newNamespace(t)
	applySamples(t, ns)
	tenant := "newsroom"
	waitWorkspace(t, ns, tenant, func(w *config.Workspace) error {
		// Every sample object compiled in: both connections, with their
		// credentials and grants.
		if len(w.Connections) != 2 {
			return fmt.Errorf("%d connections", len(w.Connections))
		}
		for _, c := range w.Connections {
			if c.SecretHash == "" || len(c.Grant.Publish.SystemIDs) == 0 || len(c.Grant.Consume.Families) == 0 {
				return fmt.Errorf("connection %s: %+v", c.Name, c)
			}
		}
		return nil
	})
	markReady(t, ns, tenant)

	p := startPod(t, ns, tenant+"-bus")
	api := "http://" + p.ports["http"] + "/v1/tenants/" + samples.WorkspaceID
	// The Pod object that stands for the process: the operator's prober
	// asks its operations port which configuration it serves.
	host, port, _ := net.SplitHostPort(p.ports["ops"])
	opsPort, _ := strconv.Atoi(port)
	startFakePod(t, ns, tenant, tenant+"-bus-0", host, int32(opsPort))
	tn := &v1alpha1.Tenant{}
	waitCondition(t, ns, tenant, tn, tenantGen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
	if tn.Status.LoadedConfigHash != tn.Status.ConfigHash {
		t.Fatalf("loaded %s, compiled %s", tn.Status.LoadedConfigHash, tn.Status.ConfigHash)
	}
	for _, name := range []string{"cms", "wire"} {
		waitCondition(t, ns, name, &v1alpha1.Connection{}, connectionGen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
	}

	clientID, secret := credentials(t, ns, "cms")
	token := issueToken(t, api, clientID, secret)
	seq := 0
	message := func() []byte {
		seq++
		m := strings.Replace(samples.MessageSample, "6f1c2a9e-4b7d-4e21-9a3f-0c5d8e7b1a20", uuid.NewString(), 1)
		return []byte(strings.Replace(m, `"sequence_number":1`, `"sequence_number":`+strconv.Itoa(seq), 1))
	}
	if status, body := publish(t, api, token, message()); status != http.StatusAccepted {
		t.Fatalf("the sample message: %d %s", status, body)
	}

	t.Run("a narrowed Grant refuses within seconds", func(t *testing.T) {
		update(t, ns, "cms-publish", &v1alpha1.Grant{}, func(g *v1alpha1.Grant) {
			g.Spec.Publish.MessageTypes = []string{"story.event", "asset.reference"}
		})
		waitWorkspace(t, ns, tenant, func(w *config.Workspace) error {
			if c, _ := w.Connection("cms"); c == nil || len(c.Grant.Publish.MessageTypes) != 2 {
				return errNotYet
			}
			return nil
		})
		// Compiled, but not yet in the pod: not in force.
		g := &v1alpha1.Grant{}
		waitCondition(t, ns, "cms-publish", g, grantGen, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonTenantNotServing)
		p.syncVolumes(t)
		waitCondition(t, ns, "cms-publish", g, grantGen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
		eventuallyAnswer(t, "the narrowed grant", func() (int, string) { return publish(t, api, token, message()) },
			http.StatusForbidden, "grant.message_type")

		update(t, ns, "cms-publish", &v1alpha1.Grant{}, func(g *v1alpha1.Grant) {
			g.Spec.Publish.MessageTypes = []string{"story.context", "story.event", "asset.reference"}
		})
		waitWorkspace(t, ns, tenant, func(w *config.Workspace) error {
			if c, _ := w.Connection("cms"); c == nil || len(c.Grant.Publish.MessageTypes) != 3 {
				return errNotYet
			}
			return nil
		})
		p.syncVolumes(t)
		eventuallyAnswer(t, "the restored grant", func() (int, string) { return publish(t, api, token, message()) },
			http.StatusAccepted, "")
	})

	t.Run("rotated credentials revoke the old token", func(t *testing.T) {
		update(t, ns, "cms", &v1alpha1.Connection{}, func(c *v1alpha1.Connection) { c.Spec.Credentials.Rotate++ })
		var newSecret string
		eventually(t, "a new client secret", func() error {
			_, newSecret = credentials(t, ns, "cms")
			if newSecret == secret {
				return errNotYet
			}
			return nil
		})
		waitWorkspace(t, ns, tenant, func(w *config.Workspace) error {
			if c, _ := w.Connection("cms"); c == nil || !auth.CheckSecret(c, newSecret) || c.CredentialsRotatedAt == nil {
				return errNotYet
			}
			return nil
		})
		p.syncVolumes(t)
		eventuallyAnswer(t, "the old token", func() (int, string) { return publish(t, api, token, message()) },
			http.StatusUnauthorized, "auth.token.revoked")
		fresh := issueToken(t, api, clientID, newSecret)
		if status, body := publish(t, api, fresh, message()); status != http.StatusAccepted {
			t.Fatalf("a token from the new secret: %d %s", status, body)
		}
	})
}

// applySamples renders config/samples with kustomize, as
// `kubectl apply -k config/samples` does, and creates the objects in ns
// in the order rendered; the API server must accept every one.
func applySamples(t *testing.T, ns string) {
	t.Helper()
	for _, u := range renderSamples(t) {
		u.SetNamespace(ns)
		create(t, u)
	}
}

// renderSamples renders config/samples/kustomization.yaml.
func renderSamples(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join("..", "config", "samples"))
	if err != nil {
		t.Fatalf("kustomize config/samples: %v", err)
	}
	var out []*unstructured.Unstructured
	for _, r := range m.Resources() {
		obj, err := r.Map()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, &unstructured.Unstructured{Object: obj})
	}
	return out
}

// pod is a bus pod of a StatefulSet, run as a process.
type pod struct {
	ns   string
	spec corev1.PodSpec
	root string
	// ports maps the container's port names to loopback addresses.
	ports map[string]string
}

// hostPath maps a path of the container to this machine: under root when
// it lies under a volumeMount, unchanged otherwise.
func (p *pod) hostPath(path string) string {
	for _, m := range p.spec.Containers[0].VolumeMounts {
		if path == m.MountPath || strings.HasPrefix(path, m.MountPath+"/") {
			return filepath.Join(p.root, path)
		}
	}
	return path
}

// rewritePaths maps every path under a mountPath in s to its place under
// root, in one pass (root itself may lie under a mountPath such as /tmp).
func (p *pod) rewritePaths(s string) string {
	var pairs []string
	for _, m := range p.spec.Containers[0].VolumeMounts {
		pairs = append(pairs, m.MountPath+"/", filepath.Join(p.root, m.MountPath)+"/")
	}
	return strings.NewReplacer(pairs...).Replace(s)
}

// startPod runs the first container of the StatefulSet's pod template, as
// its pod <statefulSet>-0, and waits for its readiness probe to pass.
func startPod(t *testing.T, ns, statefulSet string) *pod {
	t.Helper()
	sts := &appsv1.StatefulSet{}
	mustGet(t, ns, statefulSet, sts)
	p := &pod{ns: ns, spec: sts.Spec.Template.Spec, root: t.TempDir(), ports: map[string]string{}}
	c := p.spec.Containers[0]
	if len(c.Command) != 1 || c.Command[0] != "storybus" {
		t.Fatalf("command %q: the test runs only the storybus image", c.Command)
	}
	p.syncVolumes(t)

	hostPorts := map[string]string{}
	for _, cp := range c.Ports {
		addr := testutil.FreeAddr(t)
		p.ports[cp.Name] = addr
		hostPorts[":"+strconv.Itoa(int(cp.ContainerPort))] = addr
	}
	// The environment, and $(NAME) in the args expanded from it as kubelet
	// does. Of the downward API, the pod's name: the StatefulSet's first
	// pod, <name>-0.
	env := []string{"TMPDIR=" + p.hostPath("/tmp")}
	vars := map[string]string{}
	for _, e := range c.Env {
		value := p.rewritePaths(e.Value)
		if e.ValueFrom != nil {
			if f := e.ValueFrom.FieldRef; f == nil || f.FieldPath != "metadata.name" {
				t.Fatalf("env %s: this valueFrom is not played by this test", e.Name)
			}
			value = statefulSet + "-0"
		}
		vars["$("+e.Name+")"] = value
		env = append(env, e.Name+"="+value)
	}
	args := make([]string, len(c.Args))
	for i, a := range c.Args {
		if addr, ok := hostPorts[a]; ok {
			a = addr
		}
		if v, ok := vars[a]; ok {
			a = v
		}
		args[i] = p.hostPath(a)
	}

	cmd := exec.Command(buildStorybus(t), args...)
	cmd.Env = env
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("bus args %q\nbus logs:\n%s", args, logs.String())
		}
	})

	probe := c.ReadinessProbe.HTTPGet
	readyz := "http://" + p.ports[probe.Port.String()] + probe.Path
	eventually(t, "the readiness probe "+readyz, func() error {
		select {
		case <-exited:
			t.Fatalf("the bus exited:\n%s", logs.String())
		default:
		}
		res, err := http.Get(readyz)
		if err != nil {
			return err
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz %d", res.StatusCode)
		}
		return nil
	})
	return p
}

// syncVolumes writes the pod's volumes as kubelet does when it syncs the
// pod: the current content of their ConfigMaps and Secrets, read from the
// API server, in one atomic swap per volume.
func (p *pod) syncVolumes(t *testing.T) {
	t.Helper()
	volumes := map[string]corev1.Volume{}
	for _, v := range p.spec.Volumes {
		volumes[v.Name] = v
	}
	for _, m := range p.spec.Containers[0].VolumeMounts {
		dir := filepath.Join(p.root, m.MountPath)
		v, ok := volumes[m.Name]
		if !ok || v.EmptyDir != nil { // no volume: a volumeClaimTemplate
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		files := map[string][]byte{}
		var mode *int32
		switch {
		case v.ConfigMap != nil:
			p.addConfigMap(t, files, v.ConfigMap.Name, v.ConfigMap.Items)
			mode = v.ConfigMap.DefaultMode
		case v.Secret != nil:
			p.addSecret(t, files, v.Secret.SecretName, v.Secret.Items)
			mode = v.Secret.DefaultMode
		case v.Projected != nil:
			for _, src := range v.Projected.Sources {
				switch {
				case src.ConfigMap != nil:
					p.addConfigMap(t, files, src.ConfigMap.Name, src.ConfigMap.Items)
				case src.Secret != nil:
					p.addSecret(t, files, src.Secret.Name, src.Secret.Items)
				default:
					t.Fatalf("volume %s: a projection this test does not play", v.Name)
				}
			}
			mode = v.Projected.DefaultMode
		default:
			t.Fatalf("volume %s: a kind this test does not play", v.Name)
		}
		perm := os.FileMode(0o644)
		if mode != nil {
			perm = os.FileMode(*mode) | 0o600 // the test's user stands in for the pod's fsGroup
		}
		for name, b := range files {
			files[name] = []byte(p.rewritePaths(string(b)))
		}
		if err := kubelet.WriteVolume(dir, files, perm); err != nil {
			t.Fatal(err)
		}
	}
}

func (p *pod) addConfigMap(t *testing.T, files map[string][]byte, name string, items []corev1.KeyToPath) {
	t.Helper()
	cm := &corev1.ConfigMap{}
	mustGet(t, p.ns, name, cm)
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	addItems(files, data, items)
}

func (p *pod) addSecret(t *testing.T, files map[string][]byte, name string, items []corev1.KeyToPath) {
	t.Helper()
	sec := &corev1.Secret{}
	mustGet(t, p.ns, name, sec)
	addItems(files, sec.Data, items)
}

// addItems adds the keys of data as files: all of them, or only items.
func addItems(files, data map[string][]byte, items []corev1.KeyToPath) {
	if len(items) == 0 {
		for k, v := range data {
			files[k] = v
		}
		return
	}
	for _, it := range items {
		files[it.Path] = data[it.Key]
	}
}

// buildStorybus builds the storybus binary once per test process.
func buildStorybus(t *testing.T) string {
	t.Helper()
	if storybusBinary != "" {
		return storybusBinary
	}
	dir, err := os.MkdirTemp("", "storybus-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "storybus")
	build := exec.Command("go", "build", "-o", bin, "./cmd/storybus")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	storybusBinary = bin
	return bin
}

var storybusBinary string

// credentials reads a Connection's client id and secret from the
// credentials Secret its status names.
func credentials(t *testing.T, ns, connection string) (clientID, secret string) {
	t.Helper()
	c := &v1alpha1.Connection{}
	mustGet(t, ns, connection, c)
	name := c.Status.SecretName
	if name == "" {
		name = c.CredentialsSecretName()
	}
	sec := &corev1.Secret{}
	mustGet(t, ns, name, sec)
	return string(sec.Data[v1alpha1.CredentialsClientIDKey]), string(sec.Data[v1alpha1.CredentialsClientSecretKey])
}

func issueToken(t *testing.T, api, clientID, secret string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, api+"/tokens", strings.NewReader("grant_type=client_credentials"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(clientID), url.QueryEscape(secret))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var tr struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(res.Body).Decode(&tr); err != nil || res.StatusCode != http.StatusOK || tr.AccessToken == "" {
		t.Fatalf("token for %s: %d %v", clientID, res.StatusCode, err)
	}
	return tr.AccessToken
}

func publish(t *testing.T, api, token string, body []byte) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, api+"/messages", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	res, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// eventuallyAnswer polls send until it answers status with rule in its
// body, within the seconds a reload may take.
func eventuallyAnswer(t *testing.T, what string, send func() (int, string), status int, rule string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, body := send()
		if got == status && strings.Contains(body, rule) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d %s, want %d %s", what, got, body, status, rule)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
