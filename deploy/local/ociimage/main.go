// SPDX-License-Identifier: Apache-2.0

// Command ociimage writes a multi-platform OCI image archive (an OCI layout in a tar)
// from static binaries, for `ctr images import` where no registry and no image builder
// is reachable: one image index with a linux manifest per architecture, each with one
// layer of that architecture's files. The image matches what the Dockerfile builds:
// same files, entrypoint and user. Output is reproducible: fixed times, sorted entries.
// It prints each platform's size as containerd counts it, and fails over --max-compressed.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// machines are the ELF machines of the architectures an image may hold, by GOARCH name
// (which OCI platforms use too).
var machines = map[string]elf.Machine{
	"amd64":   elf.EM_X86_64,
	"arm64":   elf.EM_AARCH64,
	"ppc64le": elf.EM_PPC64,
	"riscv64": elf.EM_RISCV,
	"s390x":   elf.EM_S390,
}

// fileList is each architecture's files: arch -> path in image -> host path.
type fileList map[string]map[string]string

func (f fileList) String() string { return fmt.Sprint(map[string]map[string]string(f)) }

func (f fileList) Set(v string) error {
	arch, rest, ok := strings.Cut(v, "=")
	host, dst, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 || !path.IsAbs(dst) || host == "" {
		return fmt.Errorf("want ARCH=HOST_PATH:/IMAGE_PATH, got %q", v)
	}
	if _, known := machines[arch]; !known {
		return fmt.Errorf("--file %s: unknown architecture %q", v, arch)
	}
	if f[arch] == nil {
		f[arch] = map[string]string{}
	}
	if _, dup := f[arch][dst]; dup {
		return fmt.Errorf("--file %s: %s has a file for %s already", v, arch, dst)
	}
	f[arch][dst] = host
	return nil
}

// arches lists the architectures given, sorted.
func (f fileList) arches() []string {
	out := make([]string, 0, len(f))
	for a := range f {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

// match checks that each architecture's files are exactly the destinations given.
func (f fileList) match(dsts []string) error {
	want := map[string]bool{}
	for _, d := range dsts {
		want[d] = true
	}
	for _, arch := range f.arches() {
		for _, d := range dsts {
			if _, ok := f[arch][d]; !ok {
				return fmt.Errorf("%s: COPY to %s has no --file", arch, d)
			}
		}
		for dst := range f[arch] {
			if !want[dst] {
				return fmt.Errorf("%s: --file to %s is not copied by the stage", arch, dst)
			}
		}
	}
	return nil
}

// size is a byte count read as bytes or with a KiB, MiB or GiB suffix.
type size int64

func (s *size) String() string { return strconv.FormatInt(int64(*s), 10) }

func (s *size) Set(v string) error {
	num, mult := v, int64(1)
	for i, suffix := range []string{"KiB", "MiB", "GiB"} {
		if n, ok := strings.CutSuffix(v, suffix); ok {
			num, mult = n, 1<<(10*(i+1))
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return fmt.Errorf("want a size such as 20MiB, got %q", v)
	}
	*s = size(n * mult)
	return nil
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "ociimage: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string, report io.Writer) error {
	fs := flag.NewFlagSet("ociimage", flag.ContinueOnError)
	files := fileList{}
	fs.Var(files, "file", "ARCH=HOST_PATH:/IMAGE_PATH, repeatable; the image has a platform linux/ARCH per ARCH given")
	name := fs.String("name", "", "image reference, e.g. nr1.local/nr1-agent:dev")
	dockerfile := fs.String("dockerfile", "Dockerfile", "Dockerfile whose stage the image reproduces")
	target := fs.String("target", "", "the Dockerfile stage; without it, --entrypoint and --user say")
	entrypoint := fs.String("entrypoint", "", "entrypoint, for an image that is not a Dockerfile stage")
	user := fs.String("user", "0:0", "user, for an image that is not a Dockerfile stage")
	var maxCompressed size
	fs.Var(&maxCompressed, "max-compressed", "fail when a platform's compressed size, as containerd counts it, exceeds this (e.g. 20MiB; 0: no limit)")
	out := fs.String("out", "", "archive to write")
	buildArgs := map[string]string{}
	fs.Func("build-arg", "NAME=VALUE, repeatable: a build argument the stage's LABELs name as ${NAME}", func(v string) error {
		k, val, ok := strings.Cut(v, "=")
		if !ok || k == "" {
			return fmt.Errorf("want NAME=VALUE, got %q", v)
		}
		buildArgs[k] = val
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *name == "" || *out == "" || (*target == "") == (*entrypoint == "") || len(files) == 0 {
		return errors.New("--name, --out, --file and one of --target or --entrypoint are required")
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
		if st.labels, err = st.resolvedLabels(buildArgs); err != nil {
			return fmt.Errorf("%s stage %s: %w", *dockerfile, *target, err)
		}
	} else {
		// Every platform holds the same files.
		var dsts []string
		for dst := range files[files.arches()[0]] {
			dsts = append(dsts, dst)
		}
		if err := files.match(dsts); err != nil {
			return err
		}
	}
	img, err := build(*name, st, files)
	if err != nil {
		return fmt.Errorf("image %s: %w", *name, err)
	}
	var over []string
	for _, p := range img.platforms {
		fmt.Fprintf(report, "%s linux/%s: %s compressed (containerd's image size), %s unpacked\n", *name, p.arch, mib(p.compressed), mib(p.unpacked))
		if maxCompressed > 0 && p.compressed > int64(maxCompressed) {
			over = append(over, fmt.Sprintf("linux/%s is %s compressed, over %s", p.arch, mib(p.compressed), mib(int64(maxCompressed))))
		}
	}
	if len(over) > 0 {
		return fmt.Errorf("image %s: %s", *name, strings.Join(over, "; "))
	}
	if err := writeAtomic(*out, img.archive); err != nil {
		return fmt.Errorf("image %s: %w", *name, err)
	}
	return nil
}

func mib(n int64) string { return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20)) }

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

// platformSize is one platform's share of the image.
type platformSize struct {
	arch string
	// compressed is what containerd's image size counts for the platform: the index,
	// the platform's manifest, its config and its layer, as stored.
	compressed int64
	// unpacked is the bytes of the layer's files once unpacked.
	unpacked int64
}

type image struct {
	archive   []byte
	platforms []platformSize
}

// build makes the archive: index.json names one image index (so that an import keeps
// every platform under the one name), which lists a manifest per architecture.
func build(name string, st stage, files fileList) (image, error) {
	var (
		img       image
		blobs     [][]byte
		manifests []any
	)
	for _, arch := range files.arches() {
		layer, diffID, unpacked, err := buildLayer(arch, files[arch])
		if err != nil {
			return img, fmt.Errorf("linux/%s layer: %w", arch, err)
		}
		config := map[string]any{
			"Entrypoint": st.entrypoint,
			"User":       st.user,
			"Env":        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		}
		if len(st.labels) > 0 {
			config["Labels"] = st.labels
		}
		cfg, err := json.Marshal(map[string]any{
			"architecture": arch,
			"os":           "linux",
			"config":       config,
			"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{diffID}},
			"history":      []map[string]string{{"created_by": "ociimage", "created": epoch.Format(time.RFC3339)}},
		})
		if err != nil {
			return img, err
		}
		m := map[string]any{
			"schemaVersion": 2,
			"mediaType":     mediaManifest,
			"config":        descriptor(mediaConfig, cfg),
			"layers":        []any{descriptor(mediaLayer, layer)},
		}
		if a := annotations(st.labels); len(a) > 0 {
			m["annotations"] = a
		}
		manifest, err := json.Marshal(m)
		if err != nil {
			return img, err
		}
		md := descriptor(mediaManifest, manifest)
		md["platform"] = map[string]string{"architecture": arch, "os": "linux"}
		manifests = append(manifests, md)
		blobs = append(blobs, cfg, manifest, layer)
		img.platforms = append(img.platforms, platformSize{arch: arch, compressed: int64(len(manifest) + len(cfg) + len(layer)), unpacked: unpacked})
	}
	ix := map[string]any{"schemaVersion": 2, "mediaType": mediaIndex, "manifests": manifests}
	if a := annotations(st.labels); len(a) > 0 {
		ix["annotations"] = a
	}
	index, err := json.Marshal(ix)
	if err != nil {
		return img, err
	}
	for i := range img.platforms {
		img.platforms[i].compressed += int64(len(index))
	}
	blobs = append(blobs, index)
	top := descriptor(mediaIndex, index)
	top["annotations"] = map[string]string{"io.containerd.image.name": name, "org.opencontainers.image.ref.name": tagOf(name)}
	layout, err := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": mediaIndex, "manifests": []any{top}})
	if err != nil {
		return img, err
	}

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := writeFile(tw, "oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644); err != nil {
		return img, err
	}
	if err := writeFile(tw, "index.json", layout, 0o644); err != nil {
		return img, err
	}
	for _, b := range blobs {
		if err := writeFile(tw, blobPath(b), b, 0o644); err != nil {
			return img, err
		}
	}
	if err := tw.Close(); err != nil {
		return img, err
	}
	img.archive = buf.Bytes()
	return img, nil
}

// annotations are the image's OCI annotations: its org.opencontainers.image.* labels,
// which registries and tools read from the index and manifests, not the config.
func annotations(labels map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range labels {
		if strings.HasPrefix(k, "org.opencontainers.image.") {
			out[k] = v
		}
	}
	return out
}

const (
	mediaIndex    = "application/vnd.oci.image.index.v1+json"
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

var epoch = time.Unix(0, 0).UTC()

// buildLayer is the gzipped tar of files for arch, its diff ID and the bytes of its
// files. An ELF file built for another machine is refused: it would not run there.
func buildLayer(arch string, files map[string]string) (gz []byte, diffID string, unpacked int64, err error) {
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	dsts := make([]string, 0, len(files))
	for dst := range files {
		dsts = append(dsts, dst)
	}
	slices.Sort(dsts)
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
	slices.Sort(sortedDirs)
	for _, d := range sortedDirs {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755, ModTime: epoch}); err != nil {
			return nil, "", 0, err
		}
	}
	for _, dst := range dsts {
		data, err := os.ReadFile(files[dst])
		if err != nil {
			return nil, "", 0, err
		}
		if err := checkMachine(arch, data); err != nil {
			return nil, "", 0, fmt.Errorf("%s for %s: %w", files[dst], dst, err)
		}
		mode := int64(0o644) // a license, a configuration: read, never run
		if bytes.HasPrefix(data, []byte(elf.ELFMAG)) {
			mode = 0o755
		}
		if err := writeFile(tw, strings.TrimPrefix(dst, "/"), data, mode); err != nil {
			return nil, "", 0, err
		}
		unpacked += int64(len(data))
	}
	if err := tw.Close(); err != nil {
		return nil, "", 0, err
	}
	var out bytes.Buffer
	// The default level: the agent's layer is 13% smaller than at the fastest, for a
	// second more; the best level saves another 0.5% for three seconds more.
	zw, err := gzip.NewWriterLevel(&out, gzip.DefaultCompression)
	if err != nil {
		return nil, "", 0, err
	}
	if _, err := zw.Write(raw.Bytes()); err != nil {
		return nil, "", 0, err
	}
	if err := zw.Close(); err != nil {
		return nil, "", 0, err
	}
	return out.Bytes(), digest(raw.Bytes()), unpacked, nil
}

// siblings are the 32-bit machines whose programs an architecture's kernel runs too,
// through its compat entries: a test image may carry one, for a CG that makes its
// system calls through them.
var siblings = map[string]elf.Machine{
	"amd64": elf.EM_386,
	"arm64": elf.EM_ARM,
}

// checkMachine refuses an ELF file whose machine is neither arch's nor its 32-bit
// sibling's; other files pass.
func checkMachine(arch string, data []byte) error {
	if !bytes.HasPrefix(data, []byte(elf.ELFMAG)) {
		return nil
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("reading its ELF header: %w", err)
	}
	if f.Machine != machines[arch] && (siblings[arch] == 0 || f.Machine != siblings[arch]) {
		return fmt.Errorf("an ELF file for %v, not %s", f.Machine, arch)
	}
	return nil
}

func writeFile(tw *tar.Writer, name string, data []byte, mode int64) error {
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: epoch}); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

// writeAtomic replaces out whole, so that a failed run never leaves half an archive
// for the stack to import.
func writeAtomic(out string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(out), filepath.Base(out)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), out)
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
