package workspace

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/api/v1alpha1"
	"github.com/storybus/storybus/bus/configfile"
	"github.com/storybus/storybus/config/dev"
	"github.com/storybus/storybus/config/samples"
)

// loadSamples decodes the sample manifests into a compile input.
func loadSamples(t *testing.T) Input {
	t.Helper()
	in := Input{Secrets: map[string]*corev1.Secret{}}
	for _, name := range samples.ManifestFiles {
		b, err := samples.Manifests.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			var meta struct{ Kind string }
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			decode := func(into any) {
				t.Helper()
				if err := yaml.UnmarshalStrict(doc, into); err != nil {
					t.Fatalf("%s: %s: %v", name, meta.Kind, err)
				}
			}
			switch meta.Kind {
			case "":
			case "Tenant":
				in.Tenant = &v1alpha1.Tenant{}
				decode(in.Tenant)
			case "Connection":
				var c v1alpha1.Connection
				decode(&c)
				in.Connections = append(in.Connections, c)
			case "Grant":
				var g v1alpha1.Grant
				decode(&g)
				in.Grants = append(in.Grants, g)
			case "OwnershipPolicy":
				var p v1alpha1.OwnershipPolicy
				decode(&p)
				in.OwnershipPolicies = append(in.OwnershipPolicies, p)
			case "Secret":
				var s corev1.Secret
				decode(&s)
				s.Data = map[string][]byte{}
				for k, v := range s.StringData {
					s.Data[k] = []byte(v)
				}
				in.Secrets[s.Name] = &s
			default:
				t.Fatalf("%s: unexpected kind %s", name, meta.Kind)
			}
		}
	}
	return in
}

// TestSamplesCompileToTheDevWorkspace proves that the sample custom
// resources describe exactly the workspace `storybus dev` serves: the same
// connections, client ids, secret hashes, grants, limits and ownership.
func TestSamplesCompileToTheDevWorkspace(t *testing.T) {
	want, err := config.Parse(dev.Workspace)
	if err != nil {
		t.Fatal(err)
	}
	in := loadSamples(t)
	if in.Tenant == nil || len(in.Connections) != 2 || len(in.Grants) != 3 || len(in.OwnershipPolicies) != 1 || len(in.Secrets) != 2 {
		t.Fatalf("samples: tenant %v, %d connections, %d grants, %d policies, %d secrets",
			in.Tenant != nil, len(in.Connections), len(in.Grants), len(in.OwnershipPolicies), len(in.Secrets))
	}
	in.SigningKey = []byte(want.SigningKey)
	in.SigningKeyFile = "/etc/storybus/config/signingKey"
	got, err := Compile(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, secret, hash string }{
		{samples.CMSClientID, samples.CMSSecret, got.Connections[0].SecretHash},
		{samples.WireClientID, samples.WireSecret, got.Connections[1].SecretHash},
	} {
		if c.hash != config.HashSecret(c.secret) {
			t.Errorf("%s: secret hash %s is not the hash of the development secret", c.name, c.hash)
		}
	}
	if got.SigningKeyFile != in.SigningKeyFile {
		t.Errorf("signingKeyFile %q", got.SigningKeyFile)
	}
	got.SigningKey, got.SigningKeyFile, want.Hash = want.SigningKey, "", ""
	if !reflect.DeepEqual(got, want) {
		gb, _ := yaml.Marshal(got)
		wb, _ := yaml.Marshal(want)
		t.Errorf("compiled samples differ from config/dev/workspace-newsroom.yaml:\ngot:\n%s\nwant:\n%s", gb, wb)
	}
}

// TestCompiledConfigurationParses proves the bus reads what the operator
// writes: the YAML of a compiled workspace parses, with the signing key
// from its file, into the same workspace.
func TestCompiledConfigurationParses(t *testing.T) {
	in := loadSamples(t)
	in.SigningKey = signingKey
	in.SigningKeyFile = t.TempDir() + "/signingKey"
	w, err := Compile(in)
	if err != nil {
		t.Fatal(err)
	}
	b, err := yaml.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(in.SigningKeyFile, append(signingKey, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	path := t.TempDir() + "/workspace.yaml"
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	back, err := configfile.Load(path)
	if err != nil {
		t.Fatalf("the bus refuses the compiled configuration: %v\n%s", err, b)
	}
	back.SigningKey = ""
	// Compared as documents: a loaded configuration also remembers the
	// files it was read from.
	got, err := yaml.Marshal(back)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, b) {
		t.Errorf("round trip differs:\n%s\n%s", got, b)
	}
}
