// docs/api.md rule 2.3 checked at compile time: every type it documents as a movable value moves without
// throwing; every copyable handle (rule 2.4) copies too; the one documented as not movable does not.
// Compile-only: a broken row fails the build of test_readme. Rows follow docs/api.md's tables.
#include <doctest/doctest.h>

#include <type_traits>

#include "jitembed/jitembed.hpp"
#if defined(JITEMBED_HAS_CLIENT)
#include "jitembed/client.hpp"
#endif
#if defined(JITEMBED_HAS_LOADER)
#include "jitembed/loader.hpp"
#endif
#if defined(JITEMBED_HAS_HTTP)
#include "jitembed/net/http.hpp"
#endif
#if defined(JITEMBED_HAS_TCP_STORE)
#include "jitembed/parallel/tcp_store.hpp"
#include "jitembed/parallel/tcp_store_server.hpp"
#endif

namespace {
template <class T>
constexpr bool movable_value = std::is_nothrow_move_constructible_v<T>&& std::is_nothrow_move_assignable_v<T>;
template <class T>
constexpr bool copyable_handle = movable_value<T>&& std::is_copy_constructible_v<T>&& std::is_copy_assignable_v<T>;
}  // namespace

using namespace jitembed;

// core
static_assert(movable_value<tensor>);
static_assert(movable_value<thread_pool>);
static_assert(!std::is_copy_constructible_v<thread_pool>);

// codec
static_assert(movable_value<codec::zstd_codec>);
static_assert(copyable_handle<codec::zstd_dictionary>);
#if defined(JITEMBED_HAS_JPEG)
static_assert(movable_value<codec::jpeg_codec>);
#endif
static_assert(movable_value<codec::text_codec>);
#if defined(JITEMBED_HAS_VIDEO)
static_assert(movable_value<codec::video_codec>);
#endif

// format
static_assert(movable_value<format::shard_reader>);
static_assert(movable_value<format::webdataset_reader>);
static_assert(movable_value<format::shard_writer>);
static_assert(movable_value<format::record_builder>);
static_assert(movable_value<format::batch_builder>);
static_assert(movable_value<format::record_view>);
static_assert(movable_value<format::batch_view>);
static_assert(movable_value<format::dataset>);

// cache
static_assert(movable_value<cache::memory_cache>);
static_assert(!std::is_copy_constructible_v<cache::memory_cache>);
static_assert(copyable_handle<cache::any_store>);
static_assert(movable_value<cache::tiered_cache>);
#if defined(JITEMBED_HAS_LMDB)
static_assert(copyable_handle<cache::lmdb_cache>);
#endif
#if defined(JITEMBED_HAS_REDIS)
static_assert(copyable_handle<cache::redis_cache>);
#endif

// models
#if defined(JITEMBED_HAS_MODELS)
static_assert(movable_value<models::image_latent>);
static_assert(movable_value<models::video_latent>);
static_assert(movable_value<models::text_embed>);
static_assert(copyable_handle<models::any_model>);
#endif

// batching
static_assert(movable_value<batching::resolution_buckets>);
static_assert(movable_value<batching::dynamic_batcher<int, int>>);

// parallel
#if defined(JITEMBED_HAS_PARALLEL)
static_assert(movable_value<parallel::hash_store>);
static_assert(movable_value<parallel::file_store>);
static_assert(copyable_handle<parallel::shared_store>);
static_assert(movable_value<parallel::hybrid_plan>);
#endif
#if defined(JITEMBED_HAS_TCP_STORE)
static_assert(movable_value<parallel::tcp_store>);
static_assert(movable_value<parallel::tcp_store_server>);
#endif
#if defined(JITEMBED_HAS_GLOO)
static_assert(copyable_handle<parallel::gloo_communicator>);  // the layers keep a copy
static_assert(movable_value<parallel::column_parallel_linear<parallel::gloo_communicator>>);
static_assert(movable_value<parallel::row_parallel_linear<parallel::gloo_communicator>>);
static_assert(movable_value<parallel::tensor_parallel_mlp<parallel::gloo_communicator>>);
static_assert(movable_value<parallel::vocab_parallel_embedding<parallel::gloo_communicator>>);
static_assert(movable_value<parallel::ulysses_attention<parallel::gloo_communicator>>);
#endif

// net, server, client
#if defined(JITEMBED_HAS_HTTP)
static_assert(movable_value<net::http::server>);
static_assert(!std::is_move_constructible_v<net::http::client>);  // "not movable: a pool guarded by a mutex"
#endif
#if defined(JITEMBED_HAS_SERVER)
static_assert(movable_value<server::service>);
static_assert(movable_value<server::model_instance>);
static_assert(!std::is_constructible_v<server::service, server::server_config>);  // service::create only
#endif
#if defined(JITEMBED_HAS_CLIENT)
static_assert(copyable_handle<client::jit_client>);
#endif
#if defined(JITEMBED_HAS_LOADER)
static_assert(movable_value<loader::jit_loader>);
#endif
