// The state behind a jit_client handle: local mode (worker pool over in-process models) or remote mode
// (Asio event loop, endpoints, balancing, retries, hedging), and the endpoint watcher thread.
#pragma once

#include <sys/stat.h>

#include <atomic>
#include <fstream>
#include <sstream>

#include "jitembed/client/detail/client_common.hpp"
#include "jitembed/client/detail/client_local.hpp"
#include "jitembed/client/detail/client_remote.hpp"
#include "jitembed/net/http/client.hpp"

namespace jitembed::client::detail {

// Handlers hold `this`, not a shared_ptr: the owning jit_client closes the state (joining every thread
// that runs handlers) before it is destroyed, so no handler outlives it and no handler can be the one that
// destroys it on its own thread.
class client_state {
 public:
  using call_ptr = std::shared_ptr<remote_call>;
  using attempt_ptr = std::shared_ptr<remote_attempt>;

  static result<std::shared_ptr<client_state>> create(client_options opts) {
    const auto& src = opts.endpoints;
    const int sources = int(!src.list.empty()) + int(!src.file.empty()) + int(!src.url.empty());
    if (sources > 1) return fail(errc::invalid_argument, "client: give one endpoint source (list, file or url), not several");
    if (sources == 0 && opts.local_models.empty()) {
      return fail(errc::invalid_argument, "client: no endpoint source and no local model");
    }
    if (sources == 1 && !opts.local_models.empty()) {
      return fail(errc::invalid_argument, "client: endpoints and local models are exclusive");
    }
    for (const auto& m : opts.local_models)
      if (!m) return fail(errc::invalid_argument, "client: an empty local model");
    if (opts.request_timeout.count() <= 0 || opts.retry.max_attempts < 1 || opts.io_threads < 1) {
      return fail(errc::invalid_argument, "client: request_timeout, retry.max_attempts and io_threads must be positive");
    }
    std::shared_ptr<client_state> s(new client_state(std::move(opts)));
    if (s->local_) return s;
    // The first list must be readable now: a typo in a path fails here, not as timeouts later.
    auto first = s->read_source();
    if (!first) return first.error();
    {
      deferred d;
      std::lock_guard lk(s->mu_);
      s->apply_endpoints(*first, d);
    }
    s->start_threads();
    return s;
  }

  ~client_state() { close(); }

  bool local() const noexcept { return local_ != nullptr; }

  // --- embed -------------------------------------------------------------------------------------------

  std::uint64_t embed(embed_request req, embed_callback done) {
    const std::uint64_t id = next_id_.fetch_add(1, std::memory_order_relaxed);
    if (local_) return embed_local(id, std::move(req), std::move(done));
    deferred d;
    std::lock_guard lk(mu_);
    auto fail_now = [&](error_info e) {
      ++stats_.requests;
      ++stats_.failed;
      d.fns.push_back([done = std::move(done), e = std::move(e)]() mutable { done(std::move(e)); });
      return id;
    };
    if (closed_) return fail_now(fail(errc::cancelled, "client: closed"));
    if (req.rows.empty()) return fail_now(fail(errc::invalid_argument, "embed: no rows"));
    if (req.model.empty() || !net::http::detail::is_safe_target(req.model) || req.model.find('/') != std::string::npos ||
        req.version.find('/') != std::string::npos || !net::http::detail::is_safe_target("/" + req.version)) {
      return fail_now(fail(errc::invalid_argument, "embed: bad model name or version '" + req.model + "'"));
    }
    if (calls_.size() >= opts_.max_in_flight) {
      return fail_now(fail(errc::unavailable, "client: " + std::to_string(opts_.max_in_flight) + " requests in flight (max_in_flight)"));
    }
    if (req.coalesce_key) {
      if (auto it = coalesce_.find(*req.coalesce_key); it != coalesce_.end() && !it->second->done) {
        ++stats_.requests;
        ++stats_.coalesced;
        it->second->callbacks.push_back(std::move(done));
        return id;
      }
    }
    auto c = std::make_shared<remote_call>();
    c->id = id;
    c->model = std::move(req.model);
    c->version = std::move(req.version);
    c->input = std::move(req.input);
    c->outputs = std::move(req.outputs);
    c->n_rows = req.rows.size();
    std::vector<std::string_view> views;
    views.reserve(req.rows.size());
    for (auto r : req.rows) views.emplace_back(reinterpret_cast<const char*>(r.data()), r.size());
    auto rows = kserve::encode_bytes_elements(views);
    if (!rows) return fail_now(rows.error());
    c->rows = std::make_shared<byte_buffer>(std::move(*rows));
    std::size_t off = 0;
    for (auto r : req.rows) {
      c->row_spans.emplace_back(off + 4, r.size());
      off += 4 + r.size();
    }
    c->start = clock::now();
    c->deadline = c->start + req.timeout.value_or(opts_.request_timeout);
    c->callbacks.push_back(std::move(done));
    c->coalesce_key = req.coalesce_key;
    ++stats_.requests;
    budget_.on_request();
    calls_.emplace(id, c);
    if (c->coalesce_key) coalesce_[*c->coalesce_key] = c;
    launch(c, false, d);
    return id;
  }

  bool cancel(std::uint64_t id) {
    if (local_) {
      std::shared_ptr<local_call> lc;
      {
        std::lock_guard lk(mu_);
        auto it = local_calls_.find(id);
        if (it == local_calls_.end()) return false;
        lc = it->second;
        local_calls_.erase(it);
      }
      if (lc->done.exchange(true)) return false;
      {
        std::lock_guard lk(mu_);
        ++stats_.failed;
        ++stats_.cancelled;
      }
      lc->callback(fail(errc::cancelled, "embed: cancelled"));
      return true;
    }
    deferred d;
    std::lock_guard lk(mu_);
    auto it = calls_.find(id);
    if (it == calls_.end() || it->second->done) return false;
    ++stats_.cancelled;
    const call_ptr c = it->second;  // finish() erases the map entry
    finish(c, fail(errc::cancelled, "embed: cancelled"), d);
    return true;
  }

  // --- identity ----------------------------------------------------------------------------------------

  result<model_identity> identity(const std::string& model) {
    if (auto it = opts_.identities.find(model); it != opts_.identities.end()) return it->second;
    if (local_) {
      const auto* m = local_->find(model);
      if (!m) return fail(errc::not_found, "client: no local model '" + model + "'");
      return model_identity{std::string(m->version()), std::string(m->preprocess_key()),
                            std::string(models::to_string(m->input_modality()))};
    }
    std::vector<endpoint_address> eps;
    {
      std::lock_guard lk(mu_);
      if (auto it = identities_.find(model); it != identities_.end()) return it->second;
      for (const auto& e : endpoints_)
        if (!e->draining) eps.push_back(e->addr);
    }
    error_info last = fail(errc::unavailable, "client: no endpoint to ask for model '" + model + "' metadata");
    for (const auto& a : eps) {
      net::http::client_options ho;
      ho.connect_timeout = opts_.connect_timeout;
      ho.io_timeout = std::chrono::milliseconds(std::min<std::int64_t>(opts_.request_timeout.count(), 10000));
      net::http::client hc(a.host, a.port, ho);
      net::http::header_list h;
      if (!opts_.auth_token.empty()) h.emplace_back("Authorization", "Bearer " + opts_.auth_token);
      auto r = hc.get("/v2/models/" + model, h);
      if (!r) {
        last = r.error();
        continue;
      }
      if (r->status != 200) {
        last = http_error(r->status, r->body, "metadata of '" + model + "' from " + a.url);
        continue;
      }
      auto j = nlohmann::json::parse(r->body, nullptr, false);
      const nlohmann::json* p = nullptr;
      if (!j.is_discarded() && j.is_object()) {
        if (auto it = j.find("parameters"); it != j.end() && it->is_object()) p = &*it;
      }
      if (!p || !p->contains("fingerprint") || !(*p)["fingerprint"].is_string() || !p->contains("preprocess_key") ||
          !(*p)["preprocess_key"].is_string()) {
        return fail(errc::not_found, "model '" + model + "' on " + a.url +
                                         " publishes no parameters.fingerprint / preprocess_key: supply client_options.identities");
      }
      model_identity id{(*p)["fingerprint"].get<std::string>(), (*p)["preprocess_key"].get<std::string>(), {}};
      if (auto in = j.find("inputs"); in != j.end() && in->is_array() && !in->empty() && (*in)[0].is_object() &&
                                      (*in)[0].contains("name") && (*in)[0]["name"].is_string()) {
        id.input = (*in)[0]["name"].get<std::string>();
      }
      std::lock_guard lk(mu_);
      identities_[model] = id;
      return id;
    }
    return last;
  }

  // --- stats, endpoints, close -------------------------------------------------------------------------

  client_stats stats() const {
    std::lock_guard lk(mu_);
    client_stats s = stats_;
    s.in_flight = local_ ? local_calls_.size() : calls_.size();
    s.latency_p50_ms = latencies_.percentile(0.50);
    s.latency_p95_ms = latencies_.percentile(0.95);
    s.latency_p99_ms = latencies_.percentile(0.99);
    const auto now = clock::now();
    for (const auto& e : endpoints_) {
      endpoint_stats es;
      es.url = e->addr.url;
      es.requests = e->requests;
      es.successes = e->successes;
      es.failures = e->failures;
      es.outstanding = e->outstanding;
      es.ewma_latency_ms = e->ewma_ms;
      es.draining = e->draining;
      es.circuit_open = e->circuit_open(now);
      es.connections_opened = e->conns_opened;
      s.endpoints.push_back(std::move(es));
    }
    for (const auto& e : retired_) s.endpoints.push_back(e);
    return s;
  }

  std::vector<std::string> endpoint_urls() const {
    std::lock_guard lk(mu_);
    std::vector<std::string> out;
    for (const auto& e : endpoints_)
      if (!e->draining) out.push_back(e->addr.url);
    return out;
  }

  void close() {
    {
      deferred d;
      std::lock_guard lk(mu_);
      if (closed_) return;
      closed_ = true;
      closed_flag_ = true;
      std::vector<call_ptr> open;
      for (auto& [id, c] : calls_) open.push_back(c);
      for (auto& c : open) finish(c, fail(errc::cancelled, "client: closed with the request in flight"), d);
      for (auto& e : endpoints_) {
        for (auto& conn : e->idle) close_conn(*conn);
        e->idle.clear();
      }
    }
    watcher_cv_.notify_all();
    if (watcher_.joinable()) watcher_.join();
    work_.reset();
    if (local_) {
      local_->close();
      std::vector<std::shared_ptr<local_call>> left;
      {
        std::lock_guard lk(mu_);
        for (auto& [id, lc] : local_calls_) left.push_back(lc);
        local_calls_.clear();
      }
      for (auto& lc : left)
        if (!lc->done.exchange(true)) lc->callback(fail(errc::cancelled, "client: closed with the request in flight"));
    }
    ioc_.stop();
    for (auto& t : io_threads_)
      if (t.joinable() && t.get_id() != std::this_thread::get_id()) t.join();
      else if (t.joinable()) t.detach();
  }

 private:
  explicit client_state(client_options opts)
      : opts_(std::move(opts)), budget_(opts_.retry), rng_(std::random_device{}()), work_(asio::make_work_guard(ioc_)) {
    if (!opts_.local_models.empty()) local_ = std::make_unique<local_backend>(opts_);
  }

  // --- local mode --------------------------------------------------------------------------------------

  struct local_call {
    std::atomic<bool> done{false};
    embed_callback callback;
  };

  std::uint64_t embed_local(std::uint64_t id, embed_request req, embed_callback done) {
    auto lc = std::make_shared<local_call>();
    lc->callback = std::move(done);
    const auto* m = local_->find(req.model);
    auto finish_local = [this, lc, id](result<embed_result> r) {
      {
        std::lock_guard lk(mu_);
        local_calls_.erase(id);
      }
      if (lc->done.exchange(true)) return;
      {
        std::lock_guard lk(mu_);
        if (r) ++stats_.completed;
        else ++stats_.failed;
      }
      lc->callback(std::move(r));
    };
    {
      std::lock_guard lk(mu_);
      ++stats_.requests;
      local_calls_.emplace(id, lc);
    }
    if (!m) {
      finish_local(fail(errc::not_found, "client: no local model '" + req.model + "'"));
      return id;
    }
    if (req.rows.empty()) {
      finish_local(fail(errc::invalid_argument, "embed: no rows"));
      return id;
    }
    auto rows = std::make_shared<std::vector<byte_buffer>>();
    rows->reserve(req.rows.size());
    for (auto r : req.rows) rows->emplace_back(r.begin(), r.end());
    const auto deadline = clock::now() + req.timeout.value_or(opts_.request_timeout);
    auto task = [this, m, rows, deadline, finish_local, lc, input = req.input, wanted = req.outputs, model = req.model]() {
      if (lc->done.load()) return;
      if (clock::now() > deadline) return finish_local(fail(errc::timeout, "embed: deadline passed before the local model ran"));
      std::vector<models::named_tensors> outs;
      std::vector<bool> present;
      std::vector<error_info> errors;
      local_backend::run_rows(*m, *rows, input == "sample", decode_limits{}, outs, present, errors);
      if (rows->size() == 1 && !present[0]) return finish_local(errors[0]);
      if (!wanted.empty()) {
        for (auto& o : outs) {
          models::named_tensors kept;
          for (const auto& w : wanted)
            for (auto& nt : o)
              if (nt.first == w) kept.push_back(nt);
          o = std::move(kept);
        }
      }
      auto stacked = stack_rows(outs, present);
      if (!stacked) return finish_local(stacked.error());
      embed_result r;
      r.model_name = model;
      r.model_version = std::string(m->version());
      r.outputs = std::move(*stacked);
      r.endpoint = "local";
      if (std::find(present.begin(), present.end(), false) != present.end()) r.row_errors = std::move(errors);
      finish_local(std::move(r));
    };
    if (!local_->post(std::move(task))) finish_local(fail(errc::cancelled, "client: closed"));
    return id;
  }

  // --- endpoints ---------------------------------------------------------------------------------------

  result<std::vector<endpoint_address>> read_source() {
    const auto& src = opts_.endpoints;
    if (!src.list.empty()) {
      std::string text;
      for (const auto& u : src.list) text += u + "\n";
      return parse_endpoint_list(text);
    }
    if (!src.file.empty()) {
      std::ifstream f(src.file, std::ios::binary);
      if (!f) return fail(errc::io_error, "endpoints file '" + src.file + "' cannot be read");
      std::stringstream ss;
      ss << f.rdbuf();
      return parse_endpoint_list(ss.str());
    }
    auto u = parse_endpoint_url(src.url);
    if (!u) return u.error();
    net::http::client_options ho;
    ho.connect_timeout = opts_.connect_timeout;
    ho.io_timeout = std::chrono::milliseconds(5000);
    ho.max_response_bytes = 1 << 20;
    net::http::client hc(u->host, u->port, ho);
    auto r = hc.get(u->path.empty() ? "/" : u->path);
    if (!r) return r.error();
    if (r->status != 200) return http_error(r->status, r->body, "endpoints URL " + src.url);
    return parse_endpoint_list(r->body);
  }

  // Adds new endpoints, drains removed ones (no new attempts; dropped once their attempts finish).
  void apply_endpoints(const std::vector<endpoint_address>& list, deferred& d) {
    bool changed = false;
    for (auto& e : endpoints_) {
      const bool keep = std::any_of(list.begin(), list.end(), [&](const endpoint_address& a) { return a.url == e->addr.url; });
      if (!keep && !e->draining) {
        e->draining = true;
        changed = true;
        for (auto& conn : e->idle) close_conn(*conn);
        e->idle.clear();
      }
      if (keep && e->draining) {  // re-added before it drained
        e->draining = false;
        changed = true;
      }
    }
    for (const auto& a : list) {
      const bool have = std::any_of(endpoints_.begin(), endpoints_.end(), [&](const auto& e) { return e->addr.url == a.url; });
      if (have) continue;
      auto e = std::make_shared<endpoint_state>();
      e->addr = a;
      boost::system::error_code ec;
      const auto ip = asio::ip::make_address(a.host, ec);
      if (!ec) {
        e->resolved.emplace_back(ip, a.port);
      } else {
        tcp::resolver res(ioc_);
        auto rs = res.resolve(a.host, std::to_string(a.port), ec);
        if (!ec)
          for (const auto& r : rs) e->resolved.push_back(r.endpoint());
      }
      endpoints_.push_back(std::move(e));
      changed = true;
    }
    if (changed) ++stats_.endpoint_updates;
    reap_drained();
    if (changed) resume_waiting(d);
  }

  void reap_drained() {
    for (auto it = endpoints_.begin(); it != endpoints_.end();) {
      if ((*it)->draining && (*it)->outstanding == 0) {
        endpoint_stats es;
        es.url = (*it)->addr.url;
        es.requests = (*it)->requests;
        es.successes = (*it)->successes;
        es.failures = (*it)->failures;
        es.draining = true;
        es.connections_opened = (*it)->conns_opened;
        retired_.push_back(std::move(es));
        if (retired_.size() > 64) retired_.erase(retired_.begin());
        it = endpoints_.erase(it);
      } else {
        ++it;
      }
    }
  }

  void start_threads() {
    for (int i = 0; i < opts_.io_threads; ++i) io_threads_.emplace_back([this] { ioc_.run(); });
    watcher_ = std::thread([this] { watch(); });  // list changes and re-admission probes
  }

  // The watcher: re-reads the file (when its mtime/size changes) or the URL, and re-probes ejected models.
  void watch() {
    struct ::stat last {};
    bool have_last = false;
    std::unique_lock lk(watch_mu_);
    for (;;) {
      if (watcher_cv_.wait_for(lk, opts_.endpoints.refresh, [&] { return closed_flag_.load(); })) return;
      lk.unlock();
      if (!opts_.endpoints.file.empty()) {
        struct ::stat st {};
        if (::stat(opts_.endpoints.file.c_str(), &st) == 0) {
          const bool same = have_last && st.st_mtim.tv_sec == last.st_mtim.tv_sec && st.st_mtim.tv_nsec == last.st_mtim.tv_nsec &&
                            st.st_size == last.st_size && st.st_ino == last.st_ino;
          if (!same) {
            last = st;
            have_last = true;
            if (auto l = read_source(); l) {
              deferred d;
              std::lock_guard g(mu_);
              apply_endpoints(*l, d);
            }
          }
        }
      } else if (!opts_.endpoints.url.empty()) {
        if (auto l = read_source(); l) {
          deferred d;
          std::lock_guard g(mu_);
          apply_endpoints(*l, d);
        }
      }
      probe_ejected();
      lk.lock();
    }
  }

  // GET /v2/models/{m}/ready for every (endpoint, model) whose ejection expired: 200 re-admits it.
  void probe_ejected() {
    std::vector<std::pair<std::shared_ptr<endpoint_state>, std::string>> due;
    const auto now = clock::now();
    {
      std::lock_guard g(mu_);
      for (auto& e : endpoints_)
        for (auto& [m, until] : e->ejected)
          if (until <= now && !e->draining) due.emplace_back(e, m);
    }
    for (auto& [e, m] : due) {
      net::http::client_options ho;
      ho.connect_timeout = std::chrono::milliseconds(500);
      ho.io_timeout = std::chrono::milliseconds(1000);
      net::http::client hc(e->addr.host, e->addr.port, ho);
      net::http::header_list h;
      if (!opts_.auth_token.empty()) h.emplace_back("Authorization", "Bearer " + opts_.auth_token);
      auto r = hc.get("/v2/models/" + m + "/ready", h);
      deferred d;
      std::lock_guard g(mu_);
      if (r && r->status == 200) {
        e->ejected.erase(m);
        resume_waiting(d);
      } else {
        e->ejected[m] = clock::now() + opts_.breaker.eject_for;
      }
    }
  }

  // --- balancing ---------------------------------------------------------------------------------------

  bool eligible(const endpoint_state& e, const remote_call& c, clock::time_point now) const {
    if (e.draining || e.resolved.empty()) return false;
    if (e.circuit_open(now)) return false;
    if (e.half_open(now) && e.probe_in_flight) return false;
    if (auto it = e.ejected.find(c.model); it != e.ejected.end()) return false;
    return true;
  }

  // Power of two choices on outstanding attempts, EWMA latency as the tie break; endpoints this call
  // already tried are avoided while others are eligible.
  std::shared_ptr<endpoint_state> choose(const remote_call& c) {
    const auto now = clock::now();
    std::vector<endpoint_state*> fresh, all;
    for (auto& e : endpoints_) {
      if (!eligible(*e, c, now)) continue;
      all.push_back(e.get());
      if (!c.tried.count(e.get())) fresh.push_back(e.get());
    }
    auto& pool = fresh.empty() ? all : fresh;
    if (pool.empty()) return nullptr;
    endpoint_state* pick = pool[0];
    if (pool.size() > 1) {
      std::uniform_int_distribution<std::size_t> u(0, pool.size() - 1);
      const std::size_t i = u(rng_);
      std::size_t j = u(rng_);
      while (j == i) j = u(rng_);
      endpoint_state* a = pool[i];
      endpoint_state* b = pool[j];
      // Ties on outstanding go to the clearly faster one (EWMA more than 20% lower); otherwise a and b
      // are already a random pair, so equal servers share a sequential client's load too.
      const double la = a->has_ewma ? a->ewma_ms : 0, lb = b->has_ewma ? b->ewma_ms : 0;
      if (a->outstanding != b->outstanding) pick = a->outstanding < b->outstanding ? a : b;
      else if (lb < 0.8 * la) pick = b;
      else pick = a;
    }
    for (auto& e : endpoints_)
      if (e.get() == pick) return e;
    return nullptr;
  }

  // --- attempts ----------------------------------------------------------------------------------------

  void launch(const call_ptr& c, bool hedge, deferred& d) {
    if (c->done || closed_) return;
    const auto now = clock::now();
    if (now >= c->deadline) return finish(c, deadline_error(*c), d);
    auto ep = choose(*c);
    if (!ep) {
      c->last_error = fail(errc::unavailable, "no ready endpoint for model '" + c->model + "'");
      if (hedge) return;
      // Endpoints may come back (list change, re-admission, circuit half-open): wait for a change or a backoff.
      return schedule_retry(c, c->last_error, d, /*counts_attempt=*/false);
    }
    auto a = std::make_shared<remote_attempt>();
    a->call = c;
    a->ep = ep;
    a->hedge = hedge;
    a->start = now;
    if (ep->half_open(now)) {
      a->probe = true;
      ep->probe_in_flight = true;
    }
    c->tried.insert(ep.get());
    c->active.push_back(a);
    ++c->attempts;
    ++ep->outstanding;
    ++ep->requests;
    ++stats_.attempts;
    auto built = build_request(*c, *a);
    if (!built) {
      end_attempt(a);
      return finish(c, built.error(), d);
    }
    send(a, d);
    if (!hedge) arm_hedge(c);
  }

  result<void> build_request(remote_call& c, remote_attempt& a) {
    kserve::infer_request r;
    r.model = c.model;
    r.version = c.version;
    const auto remaining = std::chrono::duration_cast<std::chrono::microseconds>(c.deadline - clock::now()).count();
    r.parameters = kserve::json::object();
    r.parameters["binary_data_output"] = opts_.binary_outputs;
    r.parameters["timeout"] = std::max<std::int64_t>(1, remaining);
    r.inputs.push_back(kserve::infer_tensor::view(c.input, kserve::datatype::bytes,
                                                  {static_cast<std::int64_t>(c.n_rows), 1},
                                                  bytes_view(c.rows->data(), c.rows->size()), true));
    for (const auto& o : c.outputs) r.outputs.push_back({o, opts_.binary_outputs, {}});
    auto msg = kserve::encode_request(r);
    if (!msg) return msg.error();
    a.msg = std::move(*msg);
    std::string& h = a.head;
    h.reserve(256);
    h += "POST /v2/models/";
    h += c.model;
    if (!c.version.empty()) h += "/versions/" + c.version;
    h += "/infer HTTP/1.1\r\nHost: ";
    h += a.ep->addr.host + ":" + std::to_string(a.ep->addr.port);
    h += "\r\nContent-Type: application/octet-stream\r\n";
    if (a.msg.header_length) h += "Inference-Header-Content-Length: " + std::to_string(*a.msg.header_length) + "\r\n";
    if (!opts_.auth_token.empty()) h += "Authorization: Bearer " + opts_.auth_token + "\r\n";
    h += "Content-Length: " + std::to_string(a.msg.body_size()) + "\r\n\r\n";
    a.bufs.clear();
    a.bufs.emplace_back(a.head.data(), a.head.size());
    a.bufs.emplace_back(a.msg.header.data(), a.msg.header.size());
    for (auto b : a.msg.binary) a.bufs.emplace_back(b.data(), b.size());
    return {};
  }

  void send(const attempt_ptr& a, deferred& d) {
    auto& ep = *a->ep;
    if (!ep.idle.empty() && !a->fresh_retry) {
      a->conn = std::move(ep.idle.back());
      ep.idle.pop_back();
      a->reused = true;
      return write(a);
    }
    if (ep.open_conns >= opts_.max_connections_per_endpoint) {
      // Every connection of this endpoint is busy: wait for one (resume_waiting) unless the deadline passes.
      end_attempt(a);
      --a->call->attempts;
      waiting_.push_back(a->call);
      return;
    }
    (void)d;
    a->reused = false;
    a->conn = std::make_shared<http_conn>(ioc_);
    ++ep.open_conns;
    ++ep.conns_opened;
    client_state* const self = this;  // close() joins the I/O threads before the state goes
    a->conn->stream.expires_at(std::min(a->call->deadline, clock::now() + opts_.connect_timeout));
    // Every handler holds the connection: Beast's operations use the stream and buffer until they complete,
    // even when the attempt has dropped the connection (closing it only makes them complete early).
    a->conn->stream.async_connect(ep.resolved, [self, a, conn = a->conn](boost::system::error_code ec, const tcp::endpoint&) {
      deferred dd;
      std::lock_guard lk(self->mu_);
      if (a->finished) return;
      if (ec) return self->on_transport_error(a, ec, "connect", dd);
      boost::system::error_code ignored;
      a->conn->stream.socket().set_option(tcp::no_delay(true), ignored);
      self->write(a);
    });
  }

  void write(const attempt_ptr& a) {
    client_state* const self = this;  // close() joins the I/O threads before the state goes
    a->conn->stream.expires_at(a->call->deadline);
    ++a->conn->uses;
    asio::async_write(a->conn->stream, a->bufs, [self, a, conn = a->conn](boost::system::error_code ec, std::size_t) {
      deferred d;
      std::lock_guard lk(self->mu_);
      if (a->finished) return;
      if (ec) return self->on_transport_error(a, ec, "send", d);
      self->read(a);
    });
  }

  void read(const attempt_ptr& a) {
    client_state* const self = this;  // close() joins the I/O threads before the state goes
    a->conn->parser.emplace();
    a->conn->parser->header_limit(1 << 20);
    a->conn->parser->body_limit(opts_.max_response_bytes);
    bhttp::async_read(a->conn->stream, a->conn->buffer, *a->conn->parser,
                      [self, a, conn = a->conn](boost::system::error_code ec, std::size_t) {
      deferred d;
      std::lock_guard lk(self->mu_);
      if (a->finished) return;
      if (ec) return self->on_transport_error(a, ec, "response", d);
      self->on_response(a, d);
    });
  }

  // Removes the attempt from its call and its endpoint's count (idempotent).
  void end_attempt(const attempt_ptr& a) {
    if (a->finished) return;
    a->finished = true;
    if (a->ep->outstanding) --a->ep->outstanding;
    if (a->probe) a->ep->probe_in_flight = false;
    auto& act = a->call->active;
    act.erase(std::remove(act.begin(), act.end(), a), act.end());
  }

  void close_conn(http_conn& c) {
    boost::system::error_code ec;
    c.stream.socket().shutdown(tcp::socket::shutdown_both, ec);
    c.stream.socket().close(ec);
  }

  void drop_conn(const attempt_ptr& a) {
    if (!a->conn) return;
    close_conn(*a->conn);
    if (a->ep->open_conns) --a->ep->open_conns;
    a->conn.reset();
  }

  void release_conn(const attempt_ptr& a, bool keep_alive) {
    if (!a->conn) return;
    if (keep_alive && !a->ep->draining && !closed_) {
      a->conn->stream.expires_never();
      a->conn->parser.reset();
      a->ep->idle.push_back(std::move(a->conn));
    } else {
      drop_conn(a);
    }
  }

  void on_transport_error(const attempt_ptr& a, boost::system::error_code ec, const char* stage, deferred& d) {
    const auto c = a->call;
    const bool stale = a->reused && !a->fresh_retry && a->conn && a->conn->uses > 1 &&
                       (ec == bhttp::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset ||
                        ec == asio::error::broken_pipe);
    drop_conn(a);
    if (stale && !c->done) {  // the server closed an idle keep-alive connection: same attempt, fresh connection
      a->fresh_retry = true;
      a->reused = false;
      return send(a, d);
    }
    end_attempt(a);
    if (c->done) return resume_waiting(d);
    const bool deadline = clock::now() >= c->deadline;
    a->ep->failures++;
    note_endpoint_failure(*a->ep);
    error_info e = ec == beast::error::timeout && deadline
                       ? deadline_error(*c)
                       : fail(errc::io_error, std::string(stage) + " on " + a->ep->addr.url + " failed: " + ec.message());
    if (ec == beast::error::timeout && !deadline) e = fail(errc::timeout, std::string(stage) + " on " + a->ep->addr.url + " timed out");
    schedule_retry(c, e, d, true);
    resume_waiting(d);
  }

  void note_endpoint_failure(endpoint_state& e) {
    e.consecutive_failures++;
    if (e.consecutive_failures >= opts_.breaker.failure_threshold || e.half_open(clock::now())) {
      e.open_until = clock::now() + opts_.breaker.open_for;
      for (auto& conn : e.idle) close_conn(*conn);
      e.open_conns -= std::min(e.open_conns, e.idle.size());
      e.idle.clear();
    }
  }
  void note_endpoint_success(endpoint_state& e, double ms) {
    e.consecutive_failures = 0;
    e.open_until = clock::time_point{};
    e.successes++;
    e.ewma_ms = e.has_ewma ? (1 - opts_.ewma_alpha) * e.ewma_ms + opts_.ewma_alpha * ms : ms;
    e.has_ewma = true;
  }

  void on_response(const attempt_ptr& a, deferred& d) {
    const auto c = a->call;
    auto msg = a->conn->parser->release();
    const bool keep = msg.keep_alive();
    const int status = static_cast<int>(msg.result_int());
    std::string body = std::move(msg.body());
    std::optional<std::size_t> hlen;
    if (auto it = msg.find("Inference-Header-Content-Length"); it != msg.end()) {
      std::size_t v = 0;
      const auto s = net::http::detail::to_std(it->value());
      auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
      if (ec == std::errc{} && p == s.data() + s.size()) hlen = v;
    }
    release_conn(a, keep);
    const double ms = std::chrono::duration<double, std::milli>(clock::now() - a->start).count();
    end_attempt(a);
    if (status == 200) {
      note_endpoint_success(*a->ep, ms);
      latencies_.add(ms);
      if (latencies_.total() % 64 == 0 || latencies_.total() == opts_.hedge.min_samples) {
        hedge_after_ms_ = latencies_.percentile(opts_.hedge.percentile);
      }
      if (c->done) return resume_waiting(d);
      auto r = decode(*c, body, hlen, a->ep->addr.url);
      if (r && a->hedge) ++stats_.hedge_wins;
      finish(c, std::move(r), d);
      return resume_waiting(d);
    }
    auto e = http_error(status, body, "model '" + c->model + "' on " + a->ep->addr.url);
    if (status >= 500 && status != 503 && status != 504) {
      a->ep->failures++;
      note_endpoint_failure(*a->ep);
    } else {
      a->ep->consecutive_failures = 0;  // it answered: alive
      if (a->probe) a->ep->open_until = clock::time_point{};
    }
    if (c->done) return resume_waiting(d);
    if (status == 404 || e.code == errc::not_found) {
      // This endpoint does not serve the model (now): eject it for this model, try elsewhere.
      a->ep->ejected[c->model] = clock::now() + opts_.breaker.eject_for;
      const auto now = clock::now();
      const bool other = std::any_of(endpoints_.begin(), endpoints_.end(), [&](const auto& ep) { return eligible(*ep, *c, now); });
      if (other && c->attempts < opts_.retry.max_attempts) {
        ++stats_.retries;
        if (c->active.empty()) launch(c, false, d);
      } else if (c->active.empty()) {
        finish(c, e, d);
      }
      return resume_waiting(d);
    }
    if (retryable_answer(status, e.code)) {
      a->ep->failures++;
      schedule_retry(c, e, d, true);
      return resume_waiting(d);
    }
    // The caller's input: never retried. A multi-row request is resent row by row.
    if (c->n_rows > 1 && status >= 400 && status < 500) split_rows(c, d);
    else if (c->active.empty()) finish(c, e, d);
    resume_waiting(d);
  }

  result<embed_result> decode(const remote_call& c, std::string_view body, std::optional<std::size_t> hlen, const std::string& url) {
    kserve::protocol_limits lim;
    lim.max_body_bytes = std::max<std::size_t>(lim.max_body_bytes, body.size());
    auto resp = kserve::decode_response(body, hlen, lim);
    if (!resp) return fail(resp.code(), "response of " + url + ": " + resp.error().message);
    embed_result r;
    r.model_name = std::move(resp->model_name);
    r.model_version = std::move(resp->model_version);
    r.endpoint = url;
    r.attempts = c.attempts;
    for (auto& o : resp->outputs) {
      auto v = o.as_tensor_view();
      if (!v) return fail(v.code(), "response of " + url + ": " + v.error().message);
      if (v->rank() == 0 || v->shape()[0] != static_cast<std::int64_t>(c.n_rows)) {
        return fail(errc::corrupt_data, "response of " + url + ": output '" + o.name + "' has " +
                                            (v->rank() ? std::to_string(v->shape()[0]) : std::string("no")) + " rows, sent " +
                                            std::to_string(c.n_rows));
      }
      r.outputs.emplace_back(o.name, tensor::copy_of(o.data, v->dtype(), v->shape()));
    }
    return r;
  }

  error_info deadline_error(const remote_call& c) const {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(c.deadline - c.start).count();
    std::string m = "deadline of " + std::to_string(ms) + " ms passed after " + std::to_string(c.attempts) + " attempt(s)";
    if (c.last_error.code != errc::ok && c.attempts > 0) m += "; last: " + c.last_error.message;
    return fail(errc::timeout, std::move(m));
  }

  // After a retryable failure: another attempt after a jittered backoff, while attempts, the deadline and
  // the retry budget allow; otherwise the call fails with `e`. A hedge still running makes this a no-op.
  void schedule_retry(const call_ptr& c, error_info e, deferred& d, bool counts_attempt) {
    c->last_error = e;
    if (c->done || !c->active.empty()) return;
    if (counts_attempt && c->attempts >= opts_.retry.max_attempts) return finish(c, std::move(e), d);
    const auto now = clock::now();
    if (now >= c->deadline) return finish(c, deadline_error(*c), d);
    if (counts_attempt) {
      if (!budget_.try_spend(now)) {
        ++stats_.budget_exhausted;
        return finish(c, fail(e.code, e.message + " (retry budget exhausted)"), d);
      }
      ++stats_.retries;
      ++c->retries;
    }
    auto delay = backoff_delay(opts_.retry, std::max(1, c->retries), rng_);
    if (!counts_attempt) delay = std::max<std::chrono::microseconds>(delay, std::chrono::milliseconds(10));
    const auto at = std::min(c->deadline, now + delay);
    c->retry_timer = std::make_unique<asio::steady_timer>(ioc_, at);
    client_state* const self = this;  // close() joins the I/O threads before the state goes
    c->retry_timer->async_wait([self, c](boost::system::error_code ec) {
      if (ec) return;
      deferred dd;
      std::lock_guard lk(self->mu_);
      if (c->done || !c->active.empty()) return;
      self->launch(c, false, dd);
    });
  }

  // A hedge: a second attempt on another endpoint when the first is still running after the latency
  // percentile; first answer wins. Costs retry budget.
  void arm_hedge(const call_ptr& c) {
    if (!opts_.hedge.enabled || c->hedged || latencies_.size() < opts_.hedge.min_samples) return;
    const auto delay = std::chrono::duration<double, std::milli>(
        std::max<double>(hedge_after_ms_, static_cast<double>(opts_.hedge.min_delay.count())));
    c->hedge_timer = std::make_unique<asio::steady_timer>(ioc_, std::chrono::duration_cast<clock::duration>(delay));
    client_state* const self = this;  // close() joins the I/O threads before the state goes
    c->hedge_timer->async_wait([self, c](boost::system::error_code ec) {
      if (ec) return;
      deferred d;
      std::lock_guard lk(self->mu_);
      if (c->done || c->hedged || c->active.empty() || self->closed_) return;
      // Only toward an endpoint with fewer requests in flight than the primary's: when every endpoint is
      // as busy, the delay is queueing, and a hedge would only add load to a saturated fleet.
      const auto now = clock::now();
      const std::uint64_t primary = c->active.front()->ep->outstanding;
      const bool other = std::any_of(self->endpoints_.begin(), self->endpoints_.end(), [&](const auto& e) {
        return !c->tried.count(e.get()) && self->eligible(*e, *c, now) && e->outstanding < primary;
      });
      if (!other) return;
      if (!self->budget_.try_spend(now)) {
        ++self->stats_.budget_exhausted;
        return;
      }
      c->hedged = true;
      ++self->stats_.hedges;
      self->launch(c, true, d);
    });
  }

  // A 4xx on a multi-row request: each row goes out alone; rows that fail alone are reported failed.
  void split_rows(const call_ptr& c, deferred& d) {
    ++stats_.row_splits;
    auto results = std::make_shared<std::vector<std::optional<result<embed_result>>>>(c->n_rows);
    auto left = std::make_shared<std::size_t>(c->n_rows);
    client_state* const self = this;  // close() joins the I/O threads before the state goes
    for (std::size_t i = 0; i < c->n_rows; ++i) {
      auto child = std::make_shared<remote_call>();
      child->internal = true;
      child->model = c->model;
      child->version = c->version;
      child->input = c->input;
      child->outputs = c->outputs;
      child->n_rows = 1;
      const auto [off, len] = c->row_spans[i];
      auto one = kserve::encode_bytes_elements(std::vector<std::string_view>{
          std::string_view(reinterpret_cast<const char*>(c->rows->data() + off), len)});
      child->rows = std::make_shared<byte_buffer>(std::move(one).value());
      child->row_spans.emplace_back(4, len);
      child->start = clock::now();
      child->deadline = c->deadline;
      child->callbacks.push_back([self, c, results, left, i](result<embed_result> r) {
        // Runs after the lock is released (deferred): retake it to assemble the parent.
        deferred dd;
        std::lock_guard lk(self->mu_);
        (*results)[i] = std::move(r);
        if (--*left == 0 && !c->done) self->finish(c, self->assemble(*c, *results), dd);
      });
      c->children.push_back(child);
      launch(child, false, d);
    }
  }

  result<embed_result> assemble(const remote_call& c, std::vector<std::optional<result<embed_result>>>& rows) {
    embed_result out;
    out.model_name = c.model;
    out.row_errors.resize(c.n_rows);
    const embed_result* first = nullptr;
    for (auto& r : rows)
      if (r && *r) {
        first = &**r;
        break;
      }
    if (first) {
      out.model_name = first->model_name;
      out.model_version = first->model_version;
      out.endpoint = first->endpoint;
      for (const auto& [name, t] : first->outputs) {
        shape s = t.shape();
        s[0] = static_cast<std::int64_t>(c.n_rows);
        out.outputs.emplace_back(name, tensor::zeros(s, t.dtype()));
      }
    }
    for (std::size_t i = 0; i < rows.size(); ++i) {
      auto& r = *rows[i];
      if (!r) {
        out.row_errors[i] = r.error();
        continue;
      }
      out.attempts += r->attempts;
      for (auto& [name, dst] : out.outputs) {
        const tensor* src = r->find(name);
        if (!src || src->nbytes() * c.n_rows != dst.nbytes()) {
          out.row_errors[i] = fail(errc::corrupt_data, "row " + std::to_string(i) + ": output '" + name + "' differs");
          continue;
        }
        std::memcpy(static_cast<std::byte*>(dst.data()) + i * src->nbytes(), src->data(), src->nbytes());
      }
    }
    return out;
  }

  // Completes a call once: cancels its timers and other attempts, hands the result to every callback
  // (coalesced ones included) after the lock is released.
  void finish(const call_ptr& c, result<embed_result> r, deferred& d) {
    if (c->done) return;
    c->done = true;
    if (c->retry_timer) c->retry_timer->cancel();
    if (c->hedge_timer) c->hedge_timer->cancel();
    for (auto& a : std::vector<attempt_ptr>(c->active)) {
      drop_conn(a);  // a hedge loser or a cancelled attempt: its connection cannot be reused mid-response
      end_attempt(a);
    }
    for (auto& child : c->children)
      if (!child->done) finish(child, fail(errc::cancelled, "row of a finished request"), d);
    if (!c->internal) {
      calls_.erase(c->id);
      if (c->coalesce_key) {
        if (auto it = coalesce_.find(*c->coalesce_key); it != coalesce_.end() && it->second == c) coalesce_.erase(it);
      }
      if (r) stats_.completed += c->callbacks.size();
      else stats_.failed += c->callbacks.size();
    }
    if (r && !c->internal) r->attempts = std::max(r->attempts, c->attempts);
    auto cbs = std::move(c->callbacks);
    c->callbacks.clear();
    if (cbs.size() == 1) {
      d.fns.push_back([cb = std::move(cbs[0]), r = std::move(r)]() mutable { cb(std::move(r)); });
    } else {
      for (auto& cb : cbs) d.fns.push_back([cb = std::move(cb), r]() mutable { cb(std::move(r)); });
    }
    reap_drained();
  }

  // Calls that waited for a free connection or an endpoint get another chance.
  void resume_waiting(deferred& d) {
    reap_drained();
    if (waiting_.empty()) return;
    auto w = std::move(waiting_);
    waiting_.clear();
    for (auto& c : w)
      if (!c->done && c->active.empty()) launch(c, false, d);
  }

  client_options opts_;
  mutable std::mutex mu_;
  bool closed_ = false;
  std::atomic<bool> closed_flag_{false};
  std::atomic<std::uint64_t> next_id_{1};
  client_stats stats_;
  std::vector<endpoint_stats> retired_;
  retry_budget budget_;
  latency_window latencies_;
  double hedge_after_ms_ = 0;
  std::mt19937_64 rng_;
  std::map<std::string, model_identity> identities_;
  std::unique_ptr<local_backend> local_;
  std::unordered_map<std::uint64_t, std::shared_ptr<local_call>> local_calls_;

  asio::io_context ioc_;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_;
  std::vector<std::thread> io_threads_;
  std::vector<std::shared_ptr<endpoint_state>> endpoints_;
  std::unordered_map<std::uint64_t, call_ptr> calls_;
  std::unordered_map<hash128, call_ptr, hash128_hasher> coalesce_;
  std::vector<call_ptr> waiting_;

  std::mutex watch_mu_;
  std::condition_variable watcher_cv_;
  std::thread watcher_;
};

}  // namespace jitembed::client::detail
