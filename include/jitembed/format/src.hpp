// The data set's index and readers and the record parser compiled once: with JITEMBED_SEPARATE_COMPILATION
// (core/config.hpp), include this header in exactly one translation unit (loader/src.hpp does); the others include
// format/dataset.hpp or format/record_view.hpp.
#pragma once

#include "jitembed/core/config.hpp"
#include "jitembed/format/detail/dataset_impl.hpp"
#include "jitembed/format/detail/record_view_impl.hpp"
