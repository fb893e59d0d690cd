// The server side of TLS files, shared by the HTTPS server and the gRPC front's up-front checks: a TLS 1.2+
// context from a PEM certificate chain and private key, each refused with a message naming the file.
#pragma once

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>

#include <fstream>
#include <string>
#include <string_view>

#include "jitembed/core/error.hpp"

namespace jitembed::net::http::detail {

// Errors (`who` prefixes each message): invalid_argument when only one of cert and key is given, a file is
// not a PEM certificate chain / private key, or the key does not match the certificate; io_error when a
// file cannot be read. Both empty is not a call to make (plain transport).
inline result<boost::asio::ssl::context> tls_server_context(const std::string& cert, const std::string& key,
                                                            std::string_view who) {
  namespace ssl = boost::asio::ssl;
  const std::string w(who);
  if (cert.empty() || key.empty())
    return fail(errc::invalid_argument, w + ": TLS needs both a certificate file and its private key file");
  for (const auto* f : {&cert, &key}) {
    if (!std::ifstream(*f, std::ios::binary).good())
      return fail(errc::io_error,
                  w + ": cannot read TLS " + std::string(f == &cert ? "certificate" : "key") + " file '" + *f + "'");
  }
  ssl::context ctx(ssl::context::tls_server);
  ctx.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                  ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 | ssl::context::single_dh_use);
  boost::system::error_code ec;
  ctx.use_certificate_chain_file(cert, ec);
  if (ec)
    return fail(errc::invalid_argument,
                w + ": TLS certificate file '" + cert + "' is not a PEM certificate chain: " + ec.message());
  ctx.use_private_key_file(key, ssl::context::pem, ec);
  const bool mismatch = ec && ec.category() == boost::asio::error::get_ssl_category() &&
                        ERR_GET_REASON(static_cast<unsigned long>(ec.value())) == X509_R_KEY_VALUES_MISMATCH;
  if (ec && !mismatch)
    return fail(errc::invalid_argument, w + ": TLS key file '" + key + "' is not a PEM private key: " + ec.message());
  if (mismatch || SSL_CTX_check_private_key(ctx.native_handle()) != 1)
    return fail(errc::invalid_argument,
                w + ": TLS key file '" + key + "' does not match the certificate in '" + cert + "'");
  return ctx;
}

// Loads the PEM CA bundle that peers' certificates must chain to (`what` names it: "root certificate", "CA"):
// io_error when unreadable, invalid_argument when it holds no PEM certificate.
inline result<void> check_tls_ca_file(boost::asio::ssl::context& ctx, const std::string& ca_file, std::string_view who,
                                      std::string_view what = "root certificate") {
  const std::string w = std::string(who) + ": ", file = "TLS " + std::string(what) + " file '" + ca_file + "'";
  if (!std::ifstream(ca_file, std::ios::binary).good()) return fail(errc::io_error, w + "cannot read " + file);
  boost::system::error_code ec;
  ctx.load_verify_file(ca_file, ec);
  if (ec) return fail(errc::invalid_argument, w + file + " holds no PEM certificate: " + ec.message());
  return {};
}

}  // namespace jitembed::net::http::detail
