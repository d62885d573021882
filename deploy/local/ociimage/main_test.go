package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func readArchive(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		out[h.Name] = b
	}
}

func blob(t *testing.T, files map[string][]byte, digest string) []byte {
	t.Helper()
	b, ok := files["blobs/sha256/"+strings.TrimPrefix(digest, "sha256:")]
	if !ok {
		t.Fatalf("no blob %s", digest)
	}
	return b
}

// TestImageReproducesDockerfileStage builds the agent image from the project's own
// Dockerfile stage and reads back what containerd will import.
func TestImageReproducesDockerfileStage(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "nr1-agent")
	if err := os.WriteFile(bin, []byte("#!binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "img.tar")
	err := run([]string{"--dockerfile", "../../../Dockerfile", "--target", "nr1-agent", "--name", "nr1.local/nr1-agent:dev",
		"--arch", "arm64", "--file", bin + ":/nr1-agent", "--out", out})
	if err != nil {
		t.Fatal(err)
	}
	files := readArchive(t, out)
	var index struct {
		Manifests []struct {
			Digest      string
			Platform    map[string]string
			Annotations map[string]string
		}
	}
	if err := json.Unmarshal(files["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index %s: %v", files["index.json"], err)
	}
	m := index.Manifests[0]
	if m.Platform["architecture"] != "arm64" || m.Platform["os"] != "linux" || m.Annotations["io.containerd.image.name"] != "nr1.local/nr1-agent:dev" {
		t.Errorf("index entry %+v", m)
	}
	var manifest struct {
		Config struct{ Digest string }
		Layers []struct{ Digest string }
	}
	if err := json.Unmarshal(blob(t, files, m.Digest), &manifest); err != nil || len(manifest.Layers) != 1 {
		t.Fatalf("manifest: %v", err)
	}
	var cfg struct {
		Architecture string
		Config       struct {
			Entrypoint []string
			User       string
		}
	}
	if err := json.Unmarshal(blob(t, files, manifest.Config.Digest), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Architecture != "arm64" || strings.Join(cfg.Config.Entrypoint, " ") != "/nr1-agent" || cfg.Config.User != "0:0" {
		t.Errorf("config %+v", cfg)
	}
	zr, err := gzip.NewReader(bytes.NewReader(blob(t, files, manifest.Layers[0].Digest)))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	h, err := tr.Next()
	if err != nil || h.Name != "nr1-agent" || h.Mode != 0o755 {
		t.Fatalf("layer entry %+v %v", h, err)
	}
	// Reproducible: the same inputs give the same archive.
	again := filepath.Join(dir, "again.tar")
	if err := run([]string{"--dockerfile", "../../../Dockerfile", "--target", "nr1-agent", "--name", "nr1.local/nr1-agent:dev",
		"--arch", "arm64", "--file", bin + ":/nr1-agent", "--out", again}); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(out)
	b, _ := os.ReadFile(again)
	if !bytes.Equal(a, b) {
		t.Error("archive not reproducible")
	}
}

func TestStageMismatchIsRefused(t *testing.T) {
	df := "FROM golang AS build\nRUN make\nFROM scratch AS app\nCOPY --from=build /out/app /app\nUSER 65532\nENTRYPOINT [\"/app\"]\n"
	st, err := parseStage(strings.NewReader(df), "app")
	if err != nil || st.user != "65532" || st.entrypoint[0] != "/app" || st.copies[0] != "/app" {
		t.Fatalf("%+v %v", st, err)
	}
	if err := (fileList{"/bin/app": "x"}).match(st.copies); err == nil {
		t.Error("a file at another path accepted")
	}
	for _, bad := range []string{
		"FROM alpine AS app\nENTRYPOINT [\"/app\"]\n",
		"FROM scratch AS app\nRUN true\nENTRYPOINT [\"/app\"]\n",
		"FROM scratch AS app\nENTRYPOINT /app\n",
		"FROM scratch AS other\nENTRYPOINT [\"/app\"]\n",
	} {
		if _, err := parseStage(strings.NewReader(bad), "app"); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}
