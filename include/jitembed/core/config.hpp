// Build mode of the library's heavy parts. Header-only is the default. A program that defines
// JITEMBED_SEPARATE_COMPILATION (for every translation unit, e.g. with target_compile_definitions) and
// includes each heavy part's src.hpp in exactly one translation unit compiles those parts once instead of
// in every TU that includes them (as Asio's ASIO_SEPARATE_COMPILATION and fmt's compiled mode do).
// Heavy parts: the JIT client (client/src.hpp: Boost.Beast, the call table), the prefetching loader
// (loader/src.hpp: the loader state, step::collate) and the data set's index and readers with the record
// parser (format/src.hpp: dataset's members, record_view's parser and decoders; loader/src.hpp includes it, and
// a program that uses format::record_view in this mode compiles it once too).
#pragma once

#if defined(JITEMBED_SEPARATE_COMPILATION)
#define JITEMBED_DECL  // defined once, in the TU that includes the part's src.hpp
#else
#define JITEMBED_HEADER_ONLY 1
#define JITEMBED_DECL inline
#endif
