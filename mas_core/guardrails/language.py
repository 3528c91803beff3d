"""The ``language`` detector: a text written in a language that is not among the allowed ones. Its finding is about
the whole text (:data:`WHOLE_TEXT_LABELS`: one span over it, label ``language``; mask leaves the text as it is).

``language`` (``allowed``: required; ``min_chars`` 20; ``threshold`` 0.5)
    ``allowed`` lists language codes as py3langid names them (:data:`LANGUAGES`): ISO 639-1 (``en``, ``fr``,
    ``zh``, …), and ISO 639-3 for the few languages without one (``yue`` for Cantonese, ``pcm`` for Nigerian
    Pidgin). A text shorter than ``min_chars`` characters is not judged (too short to tell), nor one whose most
    likely language has a probability under ``threshold``, nor one found to hold no language (code, numbers:
    py3langid's ``zxx``). Otherwise the most likely language must be one of ``allowed``.

Only the first :data:`LANGUAGE_BYTES` bytes of the text's UTF-8 are judged (1,000 characters of English, about 550
of Russian, 330 of Chinese): py3langid walks the text byte by byte in Python, and this bound keeps a check at about
0.2 ms however long the text is (bench/guardrails.py; 0.3 ms for the whole of a 2 KB text). A text that turns to
another language past them is judged by its beginning.

The model ships inside py3langid's wheel (nothing is downloaded). It is loaded once per process, by the first
check (about 0.6 s of CPU, 90 MB of memory, and a 70 MB temporary file py3langid unpacks it through): not when this
module is imported nor when a detector is built, so that saving a guardrail never loads it. A worker makes its first
language check on its CPU pool, not on its event loop (:func:`language_loaded`). Checks share the model; it is
read-only once loaded.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from mas_core.guardrails.detector import Detector, DetectorError, DetectorSettings
from mas_core.guardrails.findings import Context, Span

if TYPE_CHECKING:
    from py3langid.langid import LanguageIdentifier

LANGUAGE_BYTES = 1_000
MAX_MIN_CHARS = 10_000
# The languages of py3langid 0.4's model (its labels, less zxx: "no linguistic content"); a test holds the two equal.
LANGUAGES: tuple[str, ...] = (
    "ace", "af", "am", "an", "ar", "ary", "arz", "as", "az", "ba", "bcl", "be", "bg", "bn", "br", "bs", "ca", "crh",
    "cs", "cy", "da", "de", "dz", "el", "en", "eo", "es", "et", "eu", "ext", "fa", "fi", "fo", "fr", "fuv", "fy", "ga",
    "gcf", "gcr", "gd", "gl", "gom", "grc", "gu", "gug", "guw", "ha", "hbo", "he", "hi", "hr", "ht", "hu", "hy", "id",
    "ig", "is", "it", "ja", "jv", "ka", "kab", "kik", "kk", "km", "kn", "ko", "ku", "ky", "la", "lb", "lg", "lij", "ln",
    "lo", "lt", "ltg", "lv", "mg", "mk", "ml", "mn", "mr", "ms", "mt", "my", "ne", "nl", "nn", "no", "nso", "oc", "om",
    "or", "pa", "pcm", "pl", "ps", "pt", "qu", "ro", "ru", "rw", "sa", "sdh", "se", "si", "sk", "sl", "sn", "so", "sq",
    "sr", "st", "sv", "sw", "ta", "te", "tg", "th", "tk", "tl", "tr", "tt", "ug", "uk", "ur", "uz", "uzs", "vec", "vi",
    "vo", "wa", "wuu", "xh", "yo", "yue", "zh", "zu",
)
NO_LANGUAGE = "zxx"

_known = frozenset(LANGUAGES)
_loading = threading.Lock()
_identifier: LanguageIdentifier | None = None


def language_identifier() -> LanguageIdentifier:
    """py3langid's identifier with probabilities for confidences, loaded by the process's first call (see the
    module); the lock makes concurrent first calls load it once."""
    global _identifier
    if _identifier is None:
        with _loading:
            if _identifier is None:
                from py3langid.langid import MODEL_FILE, LanguageIdentifier

                _identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    return _identifier


def language_loaded() -> bool:
    """Whether this process has loaded the model (its first check costs ~0.6 s of CPU: a caller on an event
    loop makes that one elsewhere)."""
    return _identifier is not None


def language_of(text: str) -> tuple[str, float]:
    """The most likely language of ``text`` (judged by its first LANGUAGE_BYTES bytes) and its probability."""
    # Cut in bytes: the library trims a character cut in the middle. surrogatepass: a lone surrogate is kept as
    # bytes, not an error.
    head = text[:LANGUAGE_BYTES].encode("utf-8", "surrogatepass")[:LANGUAGE_BYTES]
    return language_identifier().classify(head)


def language_build(settings: DetectorSettings) -> Detector:
    """The ``language`` detector (see the module)."""
    allowed = settings.strings("allowed", most=len(LANGUAGES), longest=40)
    for position, code in enumerate(allowed):
        if code not in _known:
            raise DetectorError(f"detector.allowed[{position}]",
                                f"{code!r} is not a language code the detector knows: ISO 639-1, in lower case, "
                                "such as en, fr, de or zh")
    min_chars = settings.get("min_chars", 20)
    if isinstance(min_chars, bool) or not isinstance(min_chars, int) or not 1 <= min_chars <= MAX_MIN_CHARS:
        raise DetectorError("detector.min_chars", f"must be a whole number from 1 to {MAX_MIN_CHARS:,}, not "
                                                  f"{min_chars!r}")
    threshold = settings.get("threshold", 0.5)
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 < threshold <= 1:
        raise DetectorError("detector.threshold", f"must be a number above 0 and at most 1, not {threshold!r}")
    settings.done()
    accepted = frozenset(allowed)

    def scan(text: str, context: Context) -> list[Span]:
        if len(text) < min_chars:
            return []
        language, confidence = language_of(text)
        if language in accepted or language == NO_LANGUAGE or confidence < threshold:
            return []
        return [(0, len(text), "language")]

    return Detector("language", scan)
