// Command ociimage writes a one-layer OCI image archive (an OCI layout in a tar) from
// static binaries, for `ctr images import` where no registry and no image builder is
// reachable. The image matches what the Dockerfile builds: same files, entrypoint and
// user. Output is reproducible: fixed times, sorted entries.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path"
	"sort"
	"strings"
	"time"
)

type fileList map[string]string // path in image -> host path

func (f fileList) String() string { return fmt.Sprint(map[string]string(f)) }

func (f fileList) Set(v string) error {
	host, dst, ok := strings.Cut(v, ":")
	if !ok || !path.IsAbs(dst) {
		return fmt.Errorf("want HOST_PATH:/IMAGE_PATH, got %q", v)
	}
	f[dst] = host
	return nil
}

// match checks that the files given are exactly the stage's COPY destinations.
func (f fileList) match(copies []string) error {
	want := map[string]bool{}
	for _, c := range copies {
		want[c] = true
		if _, ok := f[c]; !ok {
			return fmt.Errorf("COPY to %s has no --file", c)
		}
	}
	for dst := range f {
		if !want[dst] {
			return fmt.Errorf("--file to %s is not copied by the stage", dst)
		}
	}
	return nil
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "ociimage: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("ociimage", flag.ContinueOnError)
	files := fileList{}
	fs.Var(files, "file", "HOST_PATH:/IMAGE_PATH, repeatable")
	name := fs.String("name", "", "image reference, e.g. nr1.local/nr1-agent:dev")
	dockerfile := fs.String("dockerfile", "Dockerfile", "Dockerfile whose stage the image reproduces")
	target := fs.String("target", "", "the Dockerfile stage; without it, --entrypoint and --user say")
	entrypoint := fs.String("entrypoint", "", "entrypoint, for an image that is not a Dockerfile stage")
	user := fs.String("user", "0:0", "user, for an image that is not a Dockerfile stage")
	arch := fs.String("arch", "amd64", "image architecture")
	out := fs.String("out", "", "archive to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *name == "" || *out == "" || (*target == "") == (*entrypoint == "") {
		return fmt.Errorf("--name, --out and one of --target or --entrypoint are required")
	}
	st := stage{entrypoint: []string{*entrypoint}, user: *user}
	if *target != "" {
		var err error
		if st, err = readStage(*dockerfile, *target); err != nil {
			return err
		}
		if err := files.match(st.copies); err != nil {
			return fmt.Errorf("%s stage %s: %w", *dockerfile, *target, err)
		}
	}
	return write(*out, *name, *arch, st, files)
}

func readStage(dockerfile, target string) (stage, error) {
	df, err := os.Open(dockerfile)
	if err != nil {
		return stage{}, err
	}
	defer df.Close()
	st, err := parseStage(df, target)
	if err != nil {
		return stage{}, fmt.Errorf("%s: %w", dockerfile, err)
	}
	return st, nil
}

// write writes the image archive to out.
func write(out, name, arch string, st stage, files fileList) error {
	layer, diffID, err := buildLayer(files)
	if err != nil {
		return err
	}
	cfg, err := json.Marshal(map[string]any{
		"architecture": arch,
		"os":           "linux",
		"config": map[string]any{
			"Entrypoint": st.entrypoint,
			"User":       st.user,
			"Env":        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		},
		"rootfs":  map[string]any{"type": "layers", "diff_ids": []string{diffID}},
		"history": []map[string]string{{"created_by": "ociimage", "created": epoch.Format(time.RFC3339)}},
	})
	if err != nil {
		return err
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        descriptor("application/vnd.oci.image.config.v1+json", cfg),
		"layers":        []any{descriptor("application/vnd.oci.image.layer.v1.tar+gzip", layer)},
	})
	if err != nil {
		return err
	}
	md := descriptor("application/vnd.oci.image.manifest.v1+json", manifest)
	md["platform"] = map[string]string{"architecture": arch, "os": "linux"}
	md["annotations"] = map[string]string{"io.containerd.image.name": name, "org.opencontainers.image.ref.name": tagOf(name)}
	index, err := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []any{md}})
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	entries := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blobPath(cfg), cfg},
		{blobPath(manifest), manifest},
		{blobPath(layer), layer},
	}
	for _, e := range entries {
		if err := writeFile(tw, e.name, e.data, 0o644); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return os.WriteFile(out, buf.Bytes(), 0o644)
}

var epoch = time.Unix(0, 0).UTC()

func buildLayer(files fileList) (gz []byte, diffID string, err error) {
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	dsts := make([]string, 0, len(files))
	for dst := range files {
		dsts = append(dsts, dst)
	}
	sort.Strings(dsts)
	dirs := map[string]bool{}
	for _, dst := range dsts {
		for d := path.Dir(dst); d != "/"; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	sortedDirs := make([]string, 0, len(dirs))
	for d := range dirs {
		sortedDirs = append(sortedDirs, d)
	}
	sort.Strings(sortedDirs)
	for _, d := range sortedDirs {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755, ModTime: epoch}); err != nil {
			return nil, "", err
		}
	}
	for _, dst := range dsts {
		data, err := os.ReadFile(files[dst])
		if err != nil {
			return nil, "", err
		}
		if err := writeFile(tw, strings.TrimPrefix(dst, "/"), data, 0o755); err != nil {
			return nil, "", err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(raw.Bytes())
	var out bytes.Buffer
	zw, err := gzip.NewWriterLevel(&out, gzip.BestSpeed)
	if err != nil {
		return nil, "", err
	}
	if _, err := zw.Write(raw.Bytes()); err != nil {
		return nil, "", err
	}
	if err := zw.Close(); err != nil {
		return nil, "", err
	}
	return out.Bytes(), "sha256:" + hex.EncodeToString(sum[:]), nil
}

func writeFile(tw *tar.Writer, name string, data []byte, mode int64) error {
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: epoch}); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func descriptor(mediaType string, b []byte) map[string]any {
	return map[string]any{"mediaType": mediaType, "digest": digest(b), "size": len(b)}
}

func blobPath(b []byte) string { return "blobs/sha256/" + strings.TrimPrefix(digest(b), "sha256:") }

func tagOf(ref string) string {
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		return ref[i+1:]
	}
	return "latest"
}
