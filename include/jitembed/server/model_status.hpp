// server::model_status: one loaded model version's load, as service::status() reports it (autoscalers,
// health probes, the Python binding's Server.stats()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace jitembed::server {

struct model_status {
  std::string name;
  std::string version;
  std::size_t queued_rows = 0;        // waiting in the batcher for a batch
  std::size_t running_rows = 0;       // in a batch being run (or being delivered)
  std::size_t admitted_rows = 0;      // admitted, from request decoding to the response (includes the above)
  std::size_t max_inflight_rows = 0;  // the admission bound (503 beyond it)
  std::uint64_t success = 0;          // requests answered with outputs
  std::uint64_t failure = 0;          // requests answered with an error
  std::uint64_t rejected_admission = 0;  // requests answered 503 at once (admission bound reached)
  bool ready = true;  // false while a batch runs past a row's deadline (model_instance::ready)
};

}  // namespace jitembed::server
