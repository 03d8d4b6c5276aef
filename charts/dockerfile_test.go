package charts

import (
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// distrolessPath is the PATH that gcr.io/distroless/static sets: the
// container runtime looks the command `storybus` up there.
var distrolessPath = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// dockerfile is what the tests need to know of the repository's Dockerfile.
type dockerfile struct {
	// stages are the FROM lines' images, in order.
	stages []string
	// build is the RUN instructions of the first stage.
	build []string
	// copies are the final stage's COPY instructions.
	copies []string
	// user, entrypoint and cmd are those of the final stage.
	user       string
	entrypoint []string
	cmd        []string
}

// parseDockerfile reads the repository's Dockerfile: instructions with
// their continuation lines joined, comments dropped.
func parseDockerfile(t *testing.T) dockerfile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var d dockerfile
	var inst string
	for _, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || (trimmed == "" && inst == "") {
			continue
		}
		if cont, ok := strings.CutSuffix(trimmed, `\`); ok {
			inst += cont + " "
			continue
		}
		inst += trimmed
		keyword, args, _ := strings.Cut(inst, " ")
		inst = ""
		args = strings.TrimSpace(args)
		switch strings.ToUpper(keyword) {
		case "FROM":
			fields := strings.Fields(args)
			fields = slices.DeleteFunc(fields, func(f string) bool { return strings.HasPrefix(f, "--") })
			d.stages = append(d.stages, fields[0])
		case "RUN":
			if len(d.stages) == 1 {
				d.build = append(d.build, args)
			}
		case "COPY":
			d.copies = append(d.copies, args)
		case "USER":
			d.user = args
		case "ENTRYPOINT":
			d.entrypoint = execForm(t, "ENTRYPOINT", args)
		case "CMD":
			d.cmd = execForm(t, "CMD", args)
		}
	}
	return d
}

func execForm(t *testing.T, keyword, args string) []string {
	t.Helper()
	var v []string
	if err := json.Unmarshal([]byte(args), &v); err != nil {
		t.Fatalf("Dockerfile %s %s: want the exec (JSON) form: %v", keyword, args, err)
	}
	return v
}

// binary is where the final stage puts the storybus binary.
func (d dockerfile) binary(t *testing.T) string {
	t.Helper()
	for _, c := range d.copies {
		f := strings.Fields(c)
		if len(f) == 3 && strings.HasPrefix(f[0], "--from=") {
			return f[2]
		}
	}
	t.Fatalf("Dockerfile: no COPY --from=<build stage> of the binary in %v", d.copies)
	return ""
}

// uid is the final stage's numeric user.
func (d dockerfile) uid(t *testing.T) int64 {
	t.Helper()
	u, _, _ := strings.Cut(d.user, ":")
	n, err := strconv.ParseInt(u, 10, 64)
	if err != nil {
		t.Fatalf("Dockerfile USER %q: want a numeric uid (runAsNonRoot needs one)", d.user)
	}
	return n
}

// checkCommand checks that command runs the image's binary: an absolute
// path to it, or its name found on the image's PATH.
func (d dockerfile) checkCommand(t *testing.T, who string, command []string) {
	t.Helper()
	bin := d.binary(t)
	if len(command) == 0 {
		return // the image's ENTRYPOINT, checked by TestDockerfile
	}
	switch {
	case command[0] == bin:
	case !strings.Contains(command[0], "/") && command[0] == path.Base(bin) && slices.Contains(distrolessPath, path.Dir(bin)):
	default:
		t.Errorf("%s runs %q, but the image's binary is %s", who, command[0], bin)
	}
}

func TestDockerfile(t *testing.T) {
	d := parseDockerfile(t)
	if len(d.stages) != 2 {
		t.Fatalf("Dockerfile stages %v, want a build stage and the final image", d.stages)
	}
	if !strings.HasPrefix(d.stages[0], "golang:1.26") {
		t.Errorf("build stage %s, want golang:1.26", d.stages[0])
	}
	if d.stages[1] != "gcr.io/distroless/static:nonroot" {
		t.Errorf("final stage %s, want gcr.io/distroless/static:nonroot", d.stages[1])
	}
	var built bool
	for _, r := range d.build {
		if strings.Contains(r, "go build") {
			built = true
			for _, w := range []string{"CGO_ENABLED=0", "-trimpath", "./cmd/storybus"} {
				if !strings.Contains(r, w) {
					t.Errorf("build %q lacks %s: the binary must be static and reproducible", r, w)
				}
			}
		}
	}
	if !built {
		t.Error("Dockerfile's build stage runs no go build")
	}
	if bin := d.binary(t); bin != "/usr/local/bin/storybus" {
		t.Errorf("binary at %s, want /usr/local/bin/storybus", bin)
	}
	if uid := d.uid(t); uid != 65532 {
		t.Errorf("USER %s, want 65532 (distroless nonroot)", d.user)
	}
	if !slices.Equal(d.entrypoint, []string{d.binary(t)}) {
		t.Errorf("ENTRYPOINT %v, want [%s] so that arguments alone pick the subcommand", d.entrypoint, d.binary(t))
	}

	// The chart runs this image as the user it declares.
	ms := splitManifests(t, render(t))
	var dep appsv1.Deployment
	decode(t, find(t, ms, "Deployment", "storybus-operator"), &dep)
	pod := dep.Spec.Template.Spec
	if u := pod.SecurityContext.RunAsUser; u == nil || *u != d.uid(t) {
		t.Errorf("chart runs the operator as %v, the image's user is %d", u, d.uid(t))
	}
	c := pod.Containers[0]
	d.checkCommand(t, "the chart's Deployment", c.Command)
	if len(c.Args) == 0 || c.Args[0] != "operator" {
		t.Errorf("chart's Deployment args %v, want storybus operator …", c.Args)
	}
	if want := "ghcr.io/storybus/storybus:" + appVersion(t); c.Image != want {
		t.Errorf("chart's default image %s, want %s, the image this Dockerfile builds", c.Image, want)
	}
	// The operator's StatefulSet is checked against the Dockerfile by
	// TestInstallUpgradeUninstall, on the objects it makes.
}
