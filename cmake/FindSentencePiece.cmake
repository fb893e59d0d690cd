# Finds libsentencepiece (the tokenizer of T5-style text encoders); defines SentencePiece::SentencePiece.
include(${CMAKE_CURRENT_LIST_DIR}/JitembedFindHelpers.cmake)
jitembed_find_imported(SentencePiece SentencePiece::SentencePiece HEADER sentencepiece_processor.h LIBRARY sentencepiece PKGCONFIG sentencepiece)
