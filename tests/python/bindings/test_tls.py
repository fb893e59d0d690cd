"""HTTPS from Python: jitembed.Server(tls_cert=, tls_key=) and jitembed.Client(tls_ca_file=) give what local mode
computes; a client trusting another CA gets io_error (OSError) naming the failed handshake, and the server
still serves. Certificates made with the openssl CLI (skipped without it)."""
import os
import shutil
import subprocess

import pytest

import jitembed

TEXT = "text-embed:text_dim=32,text_max_length=16"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    exe = shutil.which("openssl")
    if not exe:
        pytest.skip("no openssl CLI to make the test certificates (Debian: openssl)")
    d = tmp_path_factory.mktemp("tls")
    p = lambda n: str(d / n)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    run = lambda *a: subprocess.run([exe, *a], check=True, capture_output=True)
    run("req", "-x509", *ec, "-keyout", p("ca.key"), "-out", p("ca.pem"), "-days", "30", "-subj", "/CN=test CA")
    run("req", "-x509", *ec, "-keyout", p("wrong.key"), "-out", p("wrong.pem"), "-days", "30", "-subj", "/CN=other CA")
    run("req", *ec, "-keyout", p("server.key"), "-out", p("server.csr"), "-subj", "/CN=localhost")
    with open(p("ext.cnf"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=critical,CA:FALSE\n"
                "extendedKeyUsage=serverAuth\nsubjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n")
    run("x509", "-req", "-in", p("server.csr"), "-CA", p("ca.pem"), "-CAkey", p("ca.key"), "-CAcreateserial",
        "-out", p("server.pem"), "-days", "30", "-extfile", p("ext.cnf"))
    return {"ca": p("ca.pem"), "cert": p("server.pem"), "key": p("server.key"), "wrong_ca": p("wrong.pem")}


def test_https_client_server_equals_local(pki):
    with jitembed.Server(models=[TEXT], io_threads=1, preprocess_threads=1, tls_cert=pki["cert"],
                         tls_key=pki["key"]) as srv, \
            jitembed.Client(local_models=[TEXT], local_threads=1) as local:
        url = f"https://{srv.url}"
        with jitembed.Client(endpoints=[url], tls_ca_file=pki["ca"], request_timeout_ms=20000) as c:
            rows = [b"a cat", b"two dogs on a mat"]
            r = c.embed("text-embed", rows, input="text")
            assert r.endpoint == url
            want = local.embed("text-embed", rows, input="text")
            for name in want.outputs:
                assert r[name].tobytes() == want[name].tobytes(), name
        with jitembed.Client(endpoints=[url], tls_ca_file=pki["wrong_ca"], request_timeout_ms=20000) as bad:
            with pytest.raises(jitembed.Error) as e:
                bad.embed("text-embed", [b"x"], input="text")
            assert "certificate verify failed" in str(e.value)
            assert isinstance(e.value, OSError)  # io_error
        with jitembed.Client(endpoints=[url], tls_ca_file=pki["ca"]) as again:
            assert again.embed("text-embed", [b"x"], input="text")["pooled"].shape[0] == 1


def test_tls_option_errors(pki):
    with pytest.raises(jitembed.Error) as e:
        jitembed.Server(models=[TEXT], tls_cert=pki["cert"], tls_key=os.path.join(os.path.dirname(pki["ca"]), "nope.key"))
    assert "nope.key" in str(e.value)
    with pytest.raises(jitembed.Error):
        jitembed.Server(models=[TEXT], tls_cert=pki["cert"])  # a certificate without its key
    with pytest.raises(jitembed.Error) as e:
        jitembed.Client(endpoints=["https://127.0.0.1:1"], tls_ca_file="/nonexistent/ca.pem")
    assert "ca.pem" in str(e.value)


def test_grpcs_client_server_equals_local(pki):
    try:
        srv = jitembed.Server(models=[TEXT], io_threads=1, preprocess_threads=1, grpc_port=0,
                              grpc_tls_cert=pki["cert"], grpc_tls_key=pki["key"])
    except jitembed.Error as e:
        if "built without the grpc component" in str(e):
            pytest.skip(str(e))
        raise
    with srv, jitembed.Client(local_models=[TEXT], local_threads=1) as local:
        url = f"grpcs://127.0.0.1:{srv.grpc_port}"
        with jitembed.Client(endpoints=[url], tls_ca_file=pki["ca"], request_timeout_ms=20000) as c:
            rows = [b"a cat", b"two dogs on a mat"]
            r = c.embed("text-embed", rows, input="text")
            assert r.endpoint == url
            want = local.embed("text-embed", rows, input="text")
            for name in want.outputs:
                assert r[name].tobytes() == want[name].tobytes(), name
        with jitembed.Client(endpoints=[url], tls_ca_file=pki["wrong_ca"], request_timeout_ms=5000,
                             max_attempts=1) as bad:
            with pytest.raises(jitembed.Error):
                bad.embed("text-embed", [b"x"], input="text")
        with pytest.raises(jitembed.Error) as e:
            jitembed.Server(models=[TEXT], grpc_port=0, grpc_tls_cert=pki["cert"],
                            grpc_tls_key=os.path.join(os.path.dirname(pki["ca"]), "nope.key"))
        assert "nope.key" in str(e.value)
