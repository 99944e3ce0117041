"""The stages of the ``transformers`` (and mistral-common) classes that decode in Python, where
they need one of their own; one module per class, as its reader in :mod:`puredetok._build.pyclasses`.

==========================  ===========================================================
module                      stage
==========================  ===========================================================
:mod:`.marian`              ``MarianTokenizer``'s SentencePiece pieces between special tokens
:mod:`.speech_ctc`          ``Wav2Vec2CTCTokenizer``'s lower case
:mod:`.tekken`              Tekken's bytes, where a control id ends a run
:mod:`.whisper`             ``WhisperTokenizer``'s timestamps and its prompt rule
:mod:`.mistral`             ``MistralCommonBackend``'s leading ``lang:xx`` removed
==========================  ===========================================================
"""
