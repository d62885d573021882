// SPDX-License-Identifier: Apache-2.0

package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"debug/elf"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
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

// elfFile writes an ELF header for machine m and some bytes after it: what the image
// tool reads of a binary.
func elfFile(t *testing.T, path string, m elf.Machine) {
	t.Helper()
	hdr := elf.Header64{Type: uint16(elf.ET_EXEC), Machine: uint16(m), Version: uint32(elf.EV_CURRENT), Ehsize: 64}
	copy(hdr.Ident[:], elf.ELFMAG)
	hdr.Ident[elf.EI_CLASS] = byte(elf.ELFCLASS64)
	hdr.Ident[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	hdr.Ident[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	var b bytes.Buffer
	if err := binary.Write(&b, binary.LittleEndian, hdr); err != nil {
		t.Fatal(err)
	}
	b.WriteString(strings.Repeat(m.String(), 100))
	if err := os.WriteFile(path, b.Bytes(), 0o755); err != nil {
		t.Fatal(err)
	}
}

type desc struct {
	MediaType   string
	Digest      string
	Size        int
	Platform    map[string]string
	Annotations map[string]string
}

type index struct {
	MediaType   string
	Manifests   []desc
	Annotations map[string]string
}

// agentImage builds the agent image from the project's own Dockerfile stage, for amd64
// and arm64, each with an ELF header of its machine, and returns the archive's path and
// what the tool reported.
func agentImage(t *testing.T, dir string, extra ...string) (string, string, error) {
	t.Helper()
	args := []string{"--dockerfile", "../../../Dockerfile", "--target", "nr1-agent", "--name", "nr1.local/nr1-agent:dev",
		"--build-arg", "VERSION=v1.2.3", "--build-arg", "REVISION=0123abcd"}
	for arch, m := range map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64} {
		bin := filepath.Join(dir, arch, "nr1-agent")
		if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
			t.Fatal(err)
		}
		elfFile(t, bin, m)
		args = append(args, "--file", arch+"="+bin+":/nr1-agent")
		for _, l := range agentLicenses {
			args = append(args, "--file", arch+"=../../../"+l+":/"+l)
		}
	}
	out := filepath.Join(dir, "img.tar")
	var report bytes.Buffer
	err := run(append(append(args, extra...), "--out", out), &report)
	return out, report.String(), err
}

// TestImageHoldsEachPlatform builds the agent image from the project's own Dockerfile
// stage and reads back what containerd will import: one image index under the image's
// name, listing a manifest per platform, each with its architecture in the index entry
// and the config, and a layer holding that architecture's binary.
func TestImageHoldsEachPlatform(t *testing.T) {
	dir := t.TempDir()
	out, report, err := agentImage(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	files := readArchive(t, out)
	var layout index
	if err := json.Unmarshal(files["index.json"], &layout); err != nil || len(layout.Manifests) != 1 {
		t.Fatalf("index.json %s: %v", files["index.json"], err)
	}
	top := layout.Manifests[0]
	if top.MediaType != mediaIndex || top.Annotations["io.containerd.image.name"] != "nr1.local/nr1-agent:dev" || top.Annotations["org.opencontainers.image.ref.name"] != "dev" {
		t.Errorf("index.json names %+v, want the image index under the image's name", top)
	}
	indexBlob := blob(t, files, top.Digest)
	var idx index
	if err := json.Unmarshal(indexBlob, &idx); err != nil || idx.MediaType != mediaIndex {
		t.Fatalf("image index %s: %v", indexBlob, err)
	}
	// The release's labels, as registries read them: on the index and every manifest.
	wantAnnotations := map[string]string{
		"org.opencontainers.image.title":    "nr1-agent",
		"org.opencontainers.image.source":   "https://github.com/neureality-sdk/nr1-agent",
		"org.opencontainers.image.version":  "v1.2.3",
		"org.opencontainers.image.revision": "0123abcd",
		"org.opencontainers.image.licenses": "Apache-2.0 AND (GPL-2.0-only OR BSD-2-Clause)",
	}
	if !maps.Equal(idx.Annotations, wantAnnotations) {
		t.Errorf("the image index's annotations %v, want %v", idx.Annotations, wantAnnotations)
	}
	var platforms []string
	for _, m := range idx.Manifests {
		arch := m.Platform["architecture"]
		platforms = append(platforms, m.Platform["os"]+"/"+arch)
		manifestBlob := blob(t, files, m.Digest)
		var manifest struct {
			Config      desc
			Layers      []desc
			Annotations map[string]string
		}
		if err := json.Unmarshal(manifestBlob, &manifest); err != nil || m.MediaType != mediaManifest || len(manifest.Layers) != 1 {
			t.Fatalf("%s manifest %s: %v", arch, manifestBlob, err)
		}
		if !maps.Equal(manifest.Annotations, wantAnnotations) {
			t.Errorf("%s manifest's annotations %v", arch, manifest.Annotations)
		}
		configBlob := blob(t, files, manifest.Config.Digest)
		var cfg struct {
			Architecture, OS string
			Config           struct {
				Entrypoint []string
				User       string
				Labels     map[string]string
			}
			RootFS struct {
				DiffIDs []string `json:"diff_ids"`
			}
		}
		if err := json.Unmarshal(configBlob, &cfg); err != nil {
			t.Fatal(err)
		}
		if cfg.Architecture != arch || cfg.OS != "linux" || strings.Join(cfg.Config.Entrypoint, " ") != "/nr1-agent" || cfg.Config.User != "0:0" ||
			!maps.Equal(cfg.Config.Labels, wantAnnotations) {
			t.Errorf("%s config %+v", arch, cfg)
		}
		layerBlob := blob(t, files, manifest.Layers[0].Digest)
		zr, err := gzip.NewReader(bytes.NewReader(layerBlob))
		if err != nil {
			t.Fatal(err)
		}
		raw, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		if len(cfg.RootFS.DiffIDs) != 1 || cfg.RootFS.DiffIDs[0] != digest(raw) {
			t.Errorf("%s diff IDs %v, want the uncompressed layer's %s", arch, cfg.RootFS.DiffIDs, digest(raw))
		}
		entries := layerFiles(t, raw)
		bin := entries["nr1-agent"].data
		if entries["nr1-agent"].mode != 0o755 {
			t.Fatalf("%s layer: nr1-agent mode %o", arch, entries["nr1-agent"].mode)
		}
		unpacked := 0
		for _, e := range entries {
			unpacked += len(e.data)
		}
		for _, l := range agentLicenses {
			want, err := os.ReadFile("../../../" + l)
			if err != nil {
				t.Fatal(err)
			}
			if e, ok := entries[l]; !ok || e.mode != 0o644 || !bytes.Equal(e.data, want) {
				t.Errorf("%s layer: %s missing, not %s, or not read-only (mode %o)", arch, l, l, e.mode)
			}
		}
		f, err := elf.NewFile(bytes.NewReader(bin))
		if err != nil {
			t.Fatal(err)
		}
		if f.Machine != machines[arch] {
			t.Errorf("the %s layer holds a binary for %v", arch, f.Machine)
		}
		// containerd's image size for the platform: what the walk from the image's
		// target (the index) down the platform's manifest meets.
		size := len(indexBlob) + len(manifestBlob) + len(configBlob) + len(layerBlob)
		line := fmt.Sprintf("nr1.local/nr1-agent:dev linux/%s: %s compressed (containerd's image size), %s unpacked", arch, mib(int64(size)), mib(int64(unpacked)))
		if !strings.Contains(report, line+"\n") {
			t.Errorf("report %q lacks %q", report, line)
		}
	}
	if got := strings.Join(platforms, " "); got != "linux/amd64 linux/arm64" {
		t.Errorf("platforms %s, want linux/amd64 linux/arm64", got)
	}

	// Reproducible: the same inputs give the same archive.
	again, _, err := agentImage(t, filepath.Join(dir, "again"))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(out)
	b, _ := os.ReadFile(again)
	if !bytes.Equal(a, b) {
		t.Error("archive not reproducible")
	}
}

// A binary built for another architecture than the one it is given for is refused:
// containerd would run it on a node of that architecture, where it cannot run.
func TestForeignBinaryIsRefused(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "pause")
	elfFile(t, bin, elf.EM_X86_64)
	out := filepath.Join(dir, "img.tar")
	err := run([]string{"--entrypoint", "/pause", "--name", "p:1", "--file", "amd64=" + bin + ":/pause", "--file", "arm64=" + bin + ":/pause", "--out", out}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "linux/arm64") || !strings.Contains(err.Error(), "EM_X86_64") {
		t.Errorf("an amd64 binary given for arm64: %v", err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("an archive was written: %v", err)
	}
}

// A 32-bit binary goes into the layer of the architecture whose kernel runs it (i386
// beside amd64, 32-bit ARM beside arm64), and no other.
func TestA32BitSiblingGoesBesideItsArchitectureOnly(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		machine   elf.Machine
		home, not string
	}{{elf.EM_386, "amd64", "arm64"}, {elf.EM_ARM, "arm64", "amd64"}} {
		bin := filepath.Join(dir, c.machine.String())
		elfFile(t, bin, c.machine)
		if err := run([]string{"--entrypoint", "/load32", "--name", "l:1", "--file", c.home + "=" + bin + ":/load32", "--out", filepath.Join(dir, "ok.tar")}, io.Discard); err != nil {
			t.Errorf("%v beside %s: %v", c.machine, c.home, err)
		}
		err := run([]string{"--entrypoint", "/load32", "--name", "l:1", "--file", c.not + "=" + bin + ":/load32", "--out", filepath.Join(dir, "not.tar")}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.machine.String()) {
			t.Errorf("%v beside %s: %v, want it refused", c.machine, c.not, err)
		}
	}
}

// Over --max-compressed, the image is refused, naming the platform and its size, and
// no archive is written.
func TestCompressedSizeLimit(t *testing.T) {
	dir := t.TempDir()
	data := make([]byte, 64<<10)
	if _, err := rand.Read(data); err != nil { // incompressible
		t.Fatal(err)
	}
	file := filepath.Join(dir, "data")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "img.tar")
	args := []string{"--entrypoint", "/data", "--name", "d:1", "--file", "arm64=" + file + ":/data", "--out", out}
	err := run(append(args, "--max-compressed", "32KiB"), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "linux/arm64 is 0.06 MiB compressed, over 0.03 MiB") {
		t.Errorf("64 KiB of random bytes under a 32 KiB limit: %v", err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("an archive was written: %v", err)
	}
	if err := run(append(args, "--max-compressed", "1MiB"), io.Discard); err != nil {
		t.Errorf("under the limit: %v", err)
	}
}

func TestSizeFlag(t *testing.T) {
	for v, want := range map[string]size{"0": 0, "512": 512, "20MiB": 20 << 20, "3KiB": 3 << 10, "1GiB": 1 << 30} {
		var s size
		if err := s.Set(v); err != nil || s != want {
			t.Errorf("Set(%q) = %d, %v; want %d", v, s, err, want)
		}
	}
	for _, bad := range []string{"", "20MB", "-1", "1.5MiB", "MiB", "9999999999999GiB"} {
		var s size
		if err := s.Set(bad); err == nil {
			t.Errorf("Set(%q) accepted: %d", bad, s)
		}
	}
}

// A LABEL's ${NAME} is the build argument given, else the ARG's default; one the stage
// does not declare, or declares without a default and is not given, is refused.
func TestLabelsTakeBuildArguments(t *testing.T) {
	st, err := parseStage(strings.NewReader("FROM scratch AS app\nARG V=dev\nARG R\nLABEL v=\"${V}\" r=\"rev ${R}\"\nENTRYPOINT [\"/app\"]\n"), "app")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args map[string]string
		want map[string]string
		err  string
	}{
		{args: map[string]string{"V": "v1", "R": "abc"}, want: map[string]string{"v": "v1", "r": "rev abc"}},
		{args: map[string]string{"R": "abc"}, want: map[string]string{"v": "dev", "r": "rev abc"}},
		{args: map[string]string{"V": "v1"}, err: "LABEL r names ${R}, which has no default and no --build-arg"},
	} {
		got, err := st.resolvedLabels(c.args)
		if (err == nil) != (c.err == "") || (err != nil && err.Error() != c.err) || !maps.Equal(got, c.want) {
			t.Errorf("build args %v: %v, %v; want %v, %q", c.args, got, err, c.want, c.err)
		}
	}
	st, err = parseStage(strings.NewReader("FROM scratch AS app\nLABEL v=\"${V}\"\nENTRYPOINT [\"/app\"]\n"), "app")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.resolvedLabels(map[string]string{"V": "x"}); err == nil || !strings.Contains(err.Error(), "declares with no ARG") {
		t.Errorf("a label naming an undeclared argument: %v", err)
	}
}

// LABELs are read as the Dockerfile writes them, several to a line.
func TestLabelsAreRead(t *testing.T) {
	st, err := parseStage(strings.NewReader("FROM scratch AS app\nLABEL a=\"x y\" b=\"(1 OR 2)\"\nLABEL c=\"\"\nENTRYPOINT [\"/app\"]\n"), "app")
	if err != nil || st.labels["a"] != "x y" || st.labels["b"] != "(1 OR 2)" || len(st.labels) != 3 {
		t.Errorf("labels %v, %v", st.labels, err)
	}
}

func TestStageMismatchIsRefused(t *testing.T) {
	df := "FROM golang AS build\nRUN make\nFROM scratch AS app\nCOPY --from=build /out/app /app\nUSER 65532\nENTRYPOINT [\"/app\"]\n"
	st, err := parseStage(strings.NewReader(df), "app")
	if err != nil || st.user != "65532" || st.entrypoint[0] != "/app" || st.copies[0] != "/app" {
		t.Fatalf("%+v %v", st, err)
	}
	for _, files := range []fileList{
		{"amd64": {"/bin/app": "x"}},                                    // another path
		{"amd64": {"/app": "x"}, "arm64": {}},                           // a platform without it
		{"amd64": {"/app": "x"}, "arm64": {"/app": "x", "/etc/x": "y"}}, // a platform with more
	} {
		if err := files.match(st.copies); err == nil {
			t.Errorf("%v accepted for COPY to /app", files)
		}
	}
	for _, bad := range []string{
		"FROM alpine AS app\nENTRYPOINT [\"/app\"]\n",
		"FROM scratch AS app\nRUN true\nENTRYPOINT [\"/app\"]\n",
		"FROM scratch AS app\nENTRYPOINT /app\n",
		"FROM scratch AS other\nENTRYPOINT [\"/app\"]\n",
		"FROM scratch AS app\nLABEL a=b\nENTRYPOINT [\"/app\"]\n",
		"FROM scratch AS app\nLABEL a=\"b\nENTRYPOINT [\"/app\"]\n",
	} {
		if _, err := parseStage(strings.NewReader(bad), "app"); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

func TestFileFlag(t *testing.T) {
	f := fileList{}
	if err := f.Set("arm64=bin/linux_arm64/nr1-agent:/nr1-agent"); err != nil || f["arm64"]["/nr1-agent"] != "bin/linux_arm64/nr1-agent" {
		t.Errorf("Set: %v %v", f, err)
	}
	for _, bad := range []string{"bin/x:/x", "arm64=bin/x", "arm64=bin/x:x", "arm64=:/x", "mips=bin/x:/x", "arm64=bin/y:/nr1-agent"} {
		if err := f.Set(bad); err == nil {
			t.Errorf("Set(%q) accepted", bad)
		}
	}
}

// agentLicenses are the license texts the agent's image carries, at these paths.
var agentLicenses = []string{"LICENSE", "LICENSES/GPL-2.0-only.txt", "LICENSES/BSD-2-Clause.txt"}

// layerEntry is a regular file of a layer.
type layerEntry struct {
	mode int64
	data []byte
}

// layerFiles reads a layer's regular files by name.
func layerFiles(t *testing.T, raw []byte) map[string]layerEntry {
	t.Helper()
	out := map[string]layerEntry{}
	tr := tar.NewReader(bytes.NewReader(raw))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = layerEntry{mode: h.Mode, data: data}
	}
}
