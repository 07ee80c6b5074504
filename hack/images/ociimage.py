#!/usr/bin/env python3
"""Turn a root filesystem directory into a one-layer OCI image and push it to a registry
(the Docker Registry HTTP API v2, plain HTTP, no auth) -- Python standard library only.

    ociimage.py --rootfs DIR --registry 127.0.0.1:5000 --tag library/nginx:latest \
        [--tag library/nginx:1.22] [--entrypoint JSON] [--cmd JSON] [--env K=V]...
        [--workdir DIR] [--user U] [--expose 80/tcp]... [--stop-signal SIG]

The layer is reproducible: entries sorted, owner 0:0, mtimes 0, gzip mtime 0. Blobs the
registry already has are not uploaded again. Prints the manifest digest.
"""
import argparse
import gzip
import hashlib
import http.client
import io
import json
import os
import sys
import tarfile

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"


def layer_bytes(rootfs):
    """(uncompressed tar, gzip of it) for rootfs, deterministic."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        paths = []
        for top, dirs, files in os.walk(rootfs):
            dirs.sort()
            for name in dirs + files:
                paths.append(os.path.relpath(os.path.join(top, name), rootfs))
        for rel in sorted(paths):
            info = tar.gettarinfo(os.path.join(rootfs, rel), arcname=rel)
            if info is None:
                continue
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            if info.isreg():
                with open(os.path.join(rootfs, rel), "rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    data = raw.getvalue()
    gz = io.BytesIO()
    with gzip.GzipFile(fileobj=gz, mode="wb", mtime=0, compresslevel=6) as g:
        g.write(data)
    return data, gz.getvalue()


def digest(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


class Registry:
    def __init__(self, addr):
        self.addr = addr

    def request(self, method, path, body=None, headers=None):
        conn = http.client.HTTPConnection(self.addr, timeout=60)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, dict(resp.getheaders()), resp.read()
        finally:
            conn.close()

    def push_blob(self, repo, data):
        d = digest(data)
        status, _, _ = self.request("HEAD", f"/v2/{repo}/blobs/{d}")
        if status == 200:
            return d
        status, headers, body = self.request("POST", f"/v2/{repo}/blobs/uploads/")
        if status != 202:
            sys.exit(f"ociimage: starting upload to {repo}: HTTP {status} {body[:200]!r}")
        location = headers.get("Location") or headers.get("location")
        if location.startswith("http"):
            location = "/" + location.split("/", 3)[3]
        sep = "&" if "?" in location else "?"
        status, _, body = self.request(
            "PUT", f"{location}{sep}digest={d}", body=data,
            headers={"Content-Type": "application/octet-stream",
                     "Content-Length": str(len(data))})
        if status != 201:
            sys.exit(f"ociimage: uploading {d} to {repo}: HTTP {status} {body[:200]!r}")
        return d

    def put_manifest(self, repo, ref, data):
        status, _, body = self.request(
            "PUT", f"/v2/{repo}/manifests/{ref}", body=data,
            headers={"Content-Type": OCI_MANIFEST})
        if status != 201:
            sys.exit(f"ociimage: manifest {repo}:{ref}: HTTP {status} {body[:200]!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rootfs", required=True)
    ap.add_argument("--registry", required=True)
    ap.add_argument("--tag", action="append", required=True, help="repo:tag in the registry")
    ap.add_argument("--entrypoint")
    ap.add_argument("--cmd")
    ap.add_argument("--env", action="append", default=[])
    ap.add_argument("--workdir", default="/")
    ap.add_argument("--user")
    ap.add_argument("--expose", action="append", default=[])
    ap.add_argument("--stop-signal")
    a = ap.parse_args()

    raw, gz = layer_bytes(a.rootfs)
    cfg = {
        "Env": a.env or ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
        "WorkingDir": a.workdir,
    }
    if a.entrypoint:
        cfg["Entrypoint"] = json.loads(a.entrypoint)
    if a.cmd:
        cfg["Cmd"] = json.loads(a.cmd)
    if a.user:
        cfg["User"] = a.user
    if a.expose:
        cfg["ExposedPorts"] = {p: {} for p in a.expose}
    if a.stop_signal:
        cfg["StopSignal"] = a.stop_signal
    config = json.dumps({
        "created": "1970-01-01T00:00:00Z",
        "architecture": "amd64",
        "os": "linux",
        "config": cfg,
        "rootfs": {"type": "layers", "diff_ids": [digest(raw)]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "hack/images/ociimage.py"}],
    }, sort_keys=True, separators=(",", ":")).encode()

    reg = Registry(a.registry)
    manifest = None
    for tag in a.tag:
        repo, ref = tag.rsplit(":", 1)
        layer_d = reg.push_blob(repo, gz)
        config_d = reg.push_blob(repo, config)
        manifest = json.dumps({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": OCI_CONFIG, "digest": config_d, "size": len(config)},
            "layers": [{"mediaType": OCI_LAYER, "digest": layer_d, "size": len(gz)}],
        }, sort_keys=True, separators=(",", ":")).encode()
        reg.put_manifest(repo, ref, manifest)
    print(digest(manifest))


if __name__ == "__main__":
    main()
