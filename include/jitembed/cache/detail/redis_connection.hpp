// Internals of the Redis store: RESP command batches sent with sendmsg (values go out by reference, no
// SIGPIPE), one hiredis connection with its own XXH3 state, and the 16-byte integrity header of a value.
#pragma once

#include <hiredis/hiredis.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <charconv>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jitembed/cache/detail/redis_reply.hpp"
#include "jitembed/cache/store.hpp"
#include "jitembed/core/buffer.hpp"
#include "jitembed/core/byte_order.hpp"
#include "jitembed/core/error.hpp"

namespace jitembed::cache::detail {

// ---- value framing -------------------------------------------------------------------------------
// A stored value is  "JERV" | u32 LE version (1) | u64 LE XXH3-64 over (16 key bytes || value) | value.
// Hashing the key in binds a value to its key: bytes copied under another key fail the check.
inline constexpr std::size_t kRedisHeaderSize = 16;
inline constexpr std::array<char, 4> kRedisMagic = {'J', 'E', 'R', 'V'};
inline constexpr std::uint32_t kRedisValueVersion = 1;

// Streaming XXH3-64 state (one per connection, so the hot path allocates nothing).
class value_hasher {
 public:
  value_hasher() : state_(XXH3_createState()) {
    if (!state_) throw std::bad_alloc();
  }
  ~value_hasher() { XXH3_freeState(state_); }
  value_hasher(const value_hasher&) = delete;
  value_hasher& operator=(const value_hasher&) = delete;

  std::uint64_t operator()(const cache_key& k, bytes_view value) noexcept {
    const auto kb = k.bytes();
    XXH3_64bits_reset(state_);
    XXH3_64bits_update(state_, kb.data(), kb.size());
    XXH3_64bits_update(state_, value.data(), value.size());
    return XXH3_64bits_digest(state_);
  }

 private:
  XXH3_state_t* state_;
};

inline std::array<std::byte, kRedisHeaderSize> make_value_header(value_hasher& h, const cache_key& k, bytes_view value) {
  std::array<std::byte, kRedisHeaderSize> hdr{};
  std::memcpy(hdr.data(), kRedisMagic.data(), 4);
  store_le<std::uint32_t>(hdr.data() + 4, kRedisValueVersion);
  store_le<std::uint64_t>(hdr.data() + 8, h(k, value));
  return hdr;
}

// Checks a stored value; on success returns the value bytes (a view into `stored`).
inline result<bytes_view> check_value(value_hasher& h, const cache_key& k, bytes_view stored, std::size_t max_value_bytes) {
  if (stored.size() < kRedisHeaderSize)
    return fail(errc::truncated, "redis value: " + std::to_string(stored.size()) + " bytes < header " +
                                     std::to_string(kRedisHeaderSize));
  if (std::memcmp(stored.data(), kRedisMagic.data(), 4) != 0) return fail(errc::bad_magic, "redis value: bad magic at offset 0");
  if (const auto ver = load_le<std::uint32_t>(stored.data() + 4); ver != kRedisValueVersion)
    return fail(errc::unsupported_version, "redis value: version " + std::to_string(ver) + " at offset 4");
  const bytes_view value = stored.subspan(kRedisHeaderSize);
  if (value.size() > max_value_bytes)
    return fail(errc::limit_exceeded, "redis value: " + std::to_string(value.size()) + " bytes > max_value_bytes " +
                                          std::to_string(max_value_bytes));
  if (load_le<std::uint64_t>(stored.data() + 8) != h(k, value))
    return fail(errc::checksum_mismatch, "redis value: checksum (XXH3-64 at offset 8) does not match key+value");
  return value;
}

// prefix + 32 lowercase hex digits, high word first (same text as cache_key::to_hex()).
inline void append_key_name(std::string& out, std::string_view prefix, const cache_key& k) {
  static constexpr char digits[] = "0123456789abcdef";
  out.append(prefix);
  char buf[32];
  for (int i = 0; i < 16; ++i) buf[i] = digits[(k.hash.high >> (60 - 4 * i)) & 0xF];
  for (int i = 0; i < 16; ++i) buf[16 + i] = digits[(k.hash.low >> (60 - 4 * i)) & 0xF];
  out.append(buf, 32);
}

// ---- RESP batches ----------------------------------------------------------------------------------
// A pipeline of RESP commands. Small parts are copied into one string; value bytes are referenced (they
// must outlive send()), so a put never copies its value before the kernel does.
class resp_batch {
 public:
  std::size_t commands() const noexcept { return commands_; }
  bool empty() const noexcept { return commands_ == 0; }
  void clear() {
    text_.clear();
    pieces_.clear();
    commands_ = 0;
  }

  // A command whose arguments are all small.
  void command(std::initializer_list<std::string_view> args) {
    header(args.size());
    for (auto a : args) small_arg(a);
    ++commands_;
  }

  // "<verb> <prefix+hex key>", e.g. GET / EXISTS / DEL.
  void key_command(std::string_view verb, std::string_view prefix, const cache_key& k) {
    header(2);
    small_arg(verb);
    key_arg(prefix, k);
    ++commands_;
  }

  // SET <key> <header||value> [EX ttl]. `value` is referenced, not copied.
  void set(std::string_view prefix, const cache_key& k, const std::array<std::byte, kRedisHeaderSize>& hdr,
           bytes_view value, std::int64_t ttl_seconds) {
    header(ttl_seconds > 0 ? 5 : 3);
    small_arg("SET");
    key_arg(prefix, k);
    length_line('$', hdr.size() + value.size());
    append_text(std::string_view(reinterpret_cast<const char*>(hdr.data()), hdr.size()));
    if (!value.empty()) pieces_.push_back({value.data(), 0, value.size()});
    append_text("\r\n");
    if (ttl_seconds > 0) {
      small_arg("EX");
      small_arg(std::to_string(ttl_seconds));
    }
    ++commands_;
  }

  // Writes the whole batch to fd. Returns 0 or the errno of the failed sendmsg (EAGAIN: SO_SNDTIMEO).
  int send_all(int fd) const {
    std::vector<iovec> iov;
    iov.reserve(pieces_.size());
    for (const auto& p : pieces_) {
      const void* base = p.external ? static_cast<const void*>(p.external) : static_cast<const void*>(text_.data() + p.offset);
      iov.push_back({const_cast<void*>(base), p.size});
    }
    std::size_t first = 0;
    while (first < iov.size()) {
      msghdr msg{};
      msg.msg_iov = iov.data() + first;
      msg.msg_iovlen = std::min<std::size_t>(iov.size() - first, IOV_MAX);
      const ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        return errno;
      }
      auto left = static_cast<std::size_t>(n);
      while (first < iov.size() && left >= iov[first].iov_len) left -= iov[first++].iov_len;
      if (left > 0) {
        iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
        iov[first].iov_len -= left;
      }
    }
    return 0;
  }

 private:
  struct piece {
    const std::byte* external;  // null: bytes live in text_ at offset
    std::size_t offset;
    std::size_t size;
  };

  void append_text(std::string_view s) {
    if (s.empty()) return;
    const std::size_t before = text_.size();
    text_.append(s);
    extend_text(before);
  }
  // "<tag><n>\r\n": an array header ('*') or a bulk string length ('$').
  void length_line(char tag, std::size_t n) {
    char buf[32];
    buf[0] = tag;
    char* end = std::to_chars(buf + 1, buf + sizeof buf - 2, n).ptr;
    *end++ = '\r';
    *end++ = '\n';
    append_text(std::string_view(buf, static_cast<std::size_t>(end - buf)));
  }
  void header(std::size_t argc) { length_line('*', argc); }
  void small_arg(std::string_view a) {
    length_line('$', a.size());
    append_text(a);
    append_text("\r\n");
  }
  void key_arg(std::string_view prefix, const cache_key& k) {
    length_line('$', prefix.size() + 32);
    const std::size_t before = text_.size();
    append_key_name(text_, prefix, k);
    text_ += "\r\n";
    extend_text(before);
  }
  // Accounts for bytes appended to text_ directly since `before`.
  void extend_text(std::size_t before) {
    const std::size_t n = text_.size() - before;
    if (!pieces_.empty() && !pieces_.back().external && pieces_.back().offset + pieces_.back().size == before) {
      pieces_.back().size += n;
    } else {
      pieces_.push_back({nullptr, before, n});
    }
  }

  std::string text_;
  std::vector<piece> pieces_;
  std::size_t commands_ = 0;
};

// ---- one connection ------------------------------------------------------------------------------
struct connect_options {
  std::string host;
  int port = 0;
  std::string unix_socket;
  std::chrono::milliseconds connect_timeout{0}, io_timeout{0};
  std::string password;
  int db = 0;
};

inline timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<decltype(tv.tv_sec)>(ms.count() / 1000);
  tv.tv_usec = static_cast<decltype(tv.tv_usec)>((ms.count() % 1000) * 1000);
  return tv;
}

inline std::string endpoint_name(const connect_options& o) {
  return o.unix_socket.empty() ? o.host + ":" + std::to_string(o.port) : "unix:" + o.unix_socket;
}

// A blocking hiredis connection with socket timeouts. Commands are written by resp_batch::send_all on the
// socket (MSG_NOSIGNAL); hiredis only parses replies. Any transport failure leaves the connection broken.
class redis_connection {
 public:
  static result<std::unique_ptr<redis_connection>> open(const connect_options& o, chunk_pool& pool) {
    redisContext* ctx = o.unix_socket.empty()
                            ? redisConnectWithTimeout(o.host.c_str(), o.port, to_timeval(o.connect_timeout))
                            : redisConnectUnixWithTimeout(o.unix_socket.c_str(), to_timeval(o.connect_timeout));
    if (!ctx) return fail(errc::io_error, "redis: connect " + endpoint_name(o) + ": cannot allocate context");
    std::unique_ptr<redisContext, context_deleter> owned(ctx);
    std::unique_ptr<redis_connection> c(new redis_connection(owned.get()));  // hasher_ first: may throw
    owned.release();
    if (ctx->err) return fail(errc::io_error, "redis: connect " + endpoint_name(o) + ": " + ctx->errstr);
    ctx->reader->fn = reply_sink::functions();  // replies are built into pooled chunks, not redisReply
    if (redisSetTimeout(ctx, to_timeval(o.io_timeout)) != REDIS_OK)
      return fail(errc::io_error, "redis: set timeout on " + endpoint_name(o) + ": " + ctx->errstr);
    resp_batch hello;
    if (!o.password.empty()) hello.command({"AUTH", o.password});
    if (o.db != 0) hello.command({"SELECT", std::to_string(o.db)});
    if (!hello.empty()) {
      auto replies = c->exchange(hello, pool);
      if (!replies) return fail(errc::io_error, "redis: handshake with " + endpoint_name(o) + ": " + replies.error().message);
      for (auto& r : *replies)
        if (r.type != REDIS_REPLY_STATUS)
          return fail(errc::io_error, "redis: handshake with " + endpoint_name(o) + ": " + (r.text.empty() ? "unexpected reply" : r.text));
    }
    return c;
  }

  redis_connection(const redis_connection&) = delete;
  redis_connection& operator=(const redis_connection&) = delete;

  // Sends the batch and reads one reply per command. On failure the connection is broken.
  result<std::vector<reply>> exchange(const resp_batch& b, chunk_pool& pool) {
    if (broken_) return fail(errc::io_error, "redis: connection already broken");
    if (const int e = b.send_all(ctx_->fd); e != 0) {
      broken_ = true;
      peer_closed_ = e == EPIPE || e == ECONNRESET;
      return fail(errc::io_error, std::string("redis: send: ") + (e == EAGAIN || e == EWOULDBLOCK ? "timed out" : std::strerror(e)));
    }
    reply_sink sink(pool, b.commands());
    ctx_->reader->privdata = &sink;
    struct unset {
      redisReader* r;
      ~unset() { r->privdata = nullptr; }
    } unset_privdata{ctx_->reader};
    std::vector<reply> replies;
    replies.reserve(b.commands());
    for (std::size_t i = 0; i < b.commands(); ++i) {
      void* r = nullptr;
      errno = 0;
      if (redisGetReply(ctx_.get(), &r) != REDIS_OK || !r) {
        const int e = errno;
        broken_ = true;
        peer_closed_ = ctx_->err == REDIS_ERR_EOF || (ctx_->err == REDIS_ERR_IO && (e == ECONNRESET || e == EPIPE));
        const bool timed_out = ctx_->err == REDIS_ERR_IO && (e == EAGAIN || e == EWOULDBLOCK);
        return fail(errc::io_error, std::string("redis: reply ") + std::to_string(i) + " of " + std::to_string(b.commands()) +
                                        ": " + (timed_out ? std::string("timed out") : std::string(ctx_->errstr)));
      }
      replies.push_back(std::move(sink.at_token(r)));
    }
    return replies;
  }

  bool broken() const noexcept { return broken_; }
  // The failure was the peer closing or resetting the connection (server restart, idle timeout), as
  // opposed to a timeout: worth one retry on a fresh connection.
  bool peer_closed() const noexcept { return peer_closed_; }
  value_hasher& hasher() noexcept { return hasher_; }

  std::uint64_t generation = 0;  // pool generation it was opened in

 private:
  struct context_deleter {
    void operator()(redisContext* c) const noexcept { redisFree(c); }
  };
  explicit redis_connection(redisContext* ctx) : ctx_(ctx) {}

  value_hasher hasher_;
  std::unique_ptr<redisContext, context_deleter> ctx_;
  bool broken_ = false;
  bool peer_closed_ = false;
};

}  // namespace jitembed::cache::detail
