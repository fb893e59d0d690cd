// Test certificates made in the test (OpenSSL's C API, no openssl CLI): a CA, a server certificate it signs
// for 127.0.0.1 / ::1 / localhost, one it signs for another name only, and an unrelated CA, as PEM files in
// a fresh temporary directory.
#pragma once

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>

namespace tls_test {

struct pki {
  std::string dir;
  std::string ca_cert;          // the CA that signed cert and other_name_cert
  std::string cert, key;        // SAN: IP 127.0.0.1, IP ::1, DNS localhost
  std::string other_name_cert;  // SAN: DNS not-this-host.example (same CA), key: other_name_key
  std::string other_name_key;
  std::string wrong_ca_cert;  // an unrelated CA
  std::string garbage;        // a file that is no PEM at all
};

namespace detail {

struct pkey_free {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
struct x509_free {
  void operator()(X509* p) const { X509_free(p); }
};
using pkey_ptr = std::unique_ptr<EVP_PKEY, pkey_free>;
using x509_ptr = std::unique_ptr<X509, x509_free>;

inline void check(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(std::string("tls_test: ") + what);
}

inline pkey_ptr make_key() {
  EVP_PKEY_CTX* kc = EVP_PKEY_CTX_new_id(EVP_PKEY_EC, nullptr);
  check(kc != nullptr, "EVP_PKEY_CTX_new_id");
  EVP_PKEY* k = nullptr;
  const bool ok = EVP_PKEY_keygen_init(kc) == 1 &&
                  EVP_PKEY_CTX_set_ec_paramgen_curve_nid(kc, NID_X9_62_prime256v1) == 1 && EVP_PKEY_keygen(kc, &k) == 1;
  EVP_PKEY_CTX_free(kc);
  check(ok, "EC key generation");
  return pkey_ptr(k);
}

inline void add_ext(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  check(ext != nullptr, value);
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
}

// A certificate for `key` named `cn`, signed by (issuer, issuer_key), or self-signed when issuer is null.
inline x509_ptr make_cert(EVP_PKEY* key, const char* cn, X509* issuer, EVP_PKEY* issuer_key, bool ca, const char* san) {
  static std::atomic<long> serial{1};
  x509_ptr c(X509_new());
  X509_set_version(c.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(c.get()), serial++);
  X509_gmtime_adj(X509_getm_notBefore(c.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(c.get()), 3600L * 24 * 30);
  X509_set_pubkey(c.get(), key);
  X509_NAME* name = X509_get_subject_name(c.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn), -1, -1, 0);
  X509* iss = issuer ? issuer : c.get();
  X509_set_issuer_name(c.get(), X509_get_subject_name(iss));
  if (ca) {
    add_ext(c.get(), iss, NID_basic_constraints, "critical,CA:TRUE");
    add_ext(c.get(), iss, NID_key_usage, "critical,keyCertSign,cRLSign");
    add_ext(c.get(), iss, NID_subject_key_identifier, "hash");
  } else {
    add_ext(c.get(), iss, NID_basic_constraints, "critical,CA:FALSE");
    add_ext(c.get(), iss, NID_key_usage, "critical,digitalSignature,keyEncipherment");
    add_ext(c.get(), iss, NID_ext_key_usage, "serverAuth");
    add_ext(c.get(), iss, NID_subject_alt_name, san);
  }
  check(X509_sign(c.get(), issuer_key ? issuer_key : key, EVP_sha256()) > 0, "X509_sign");
  return c;
}

inline void write_cert(const std::string& path, X509* c) {
  FILE* f = std::fopen(path.c_str(), "wb");
  check(f != nullptr, "open cert file");
  const bool ok = PEM_write_X509(f, c) == 1;
  std::fclose(f);
  check(ok, "PEM_write_X509");
}

inline void write_key(const std::string& path, EVP_PKEY* k) {
  FILE* f = std::fopen(path.c_str(), "wb");
  check(f != nullptr, "open key file");
  const bool ok = PEM_write_PrivateKey(f, k, nullptr, nullptr, 0, nullptr, nullptr) == 1;
  std::fclose(f);
  check(ok, "PEM_write_PrivateKey");
}

}  // namespace detail

// Makes the files once per process (in $TMPDIR/jitembed_tls_<pid>); removed at exit.
inline const pki& files() {
  static const pki p = [] {
    namespace fs = std::filesystem;
    pki out;
    out.dir = (fs::temp_directory_path() / ("jitembed_tls_" + std::to_string(::getpid()))).string();
    fs::create_directories(out.dir);
    const auto at = [&](const char* n) { return out.dir + "/" + n; };
    auto ca_key = detail::make_key();
    auto ca = detail::make_cert(ca_key.get(), "jitembed test CA", nullptr, nullptr, true, nullptr);
    auto key = detail::make_key();
    auto cert =
        detail::make_cert(key.get(), "localhost", ca.get(), ca_key.get(), false, "IP:127.0.0.1,IP:::1,DNS:localhost");
    auto other_key = detail::make_key();
    auto other = detail::make_cert(other_key.get(), "not-this-host.example", ca.get(), ca_key.get(), false,
                                   "DNS:not-this-host.example");
    auto wrong_key = detail::make_key();
    auto wrong = detail::make_cert(wrong_key.get(), "another CA", nullptr, nullptr, true, nullptr);
    out.ca_cert = at("ca.pem");
    out.cert = at("server.pem");
    out.key = at("server.key");
    out.other_name_cert = at("other.pem");
    out.other_name_key = at("other.key");
    out.wrong_ca_cert = at("wrong_ca.pem");
    out.garbage = at("garbage.pem");
    detail::write_cert(out.ca_cert, ca.get());
    detail::write_cert(out.cert, cert.get());
    detail::write_key(out.key, key.get());
    detail::write_cert(out.other_name_cert, other.get());
    detail::write_key(out.other_name_key, other_key.get());
    detail::write_cert(out.wrong_ca_cert, wrong.get());
    {
      FILE* f = std::fopen(out.garbage.c_str(), "wb");
      std::fputs("this is not a certificate\n", f);
      std::fclose(f);
    }
    static const std::string dir = out.dir;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    });
    return out;
  }();
  return p;
}

}  // namespace tls_test
