"""The prompts of the golden logits (`<model>/logits.gguf`), in their order there.

`chat` is not text but a user message: golden_logits.py renders it with the model's chat
template. `long` (the opening of the Apache License 2.0, about 800 tokens) reaches past gemma3's
512-token sliding window. SYNTH_PROMPTS are the synthetic models' (regenerate_synth.sh).
"""

CHAT_USER_MESSAGE = "What is the capital of France?"

SHORT = "The capital of France is"

PARAGRAPH = (
    "Lighthouses have guided sailors along dangerous coasts for more than two thousand "
    "years. The earliest known example, the Pharos of Alexandria, was built in the third "
    "century before the common era and stood for centuries as one of the wonders of "
    "the ancient world. Early lighthouses burned wood or coal in open fires, which produced "
    "a weak and smoky light that was difficult to see in bad weather. In the eighteenth "
    "and nineteenth centuries, engineers began to use oil lamps with polished reflectors, "
    "and later the Fresnel lens, which bent and focused the light into a powerful beam "
    "that could be seen from many miles away. Each lighthouse was given a distinctive "
    "pattern of flashes so that a captain could identify it at night. Keepers and their "
    "families often lived in isolated stations, trimming wicks, winding clockwork mechanisms "
    "and recording the weather. Today most lighthouses are automated, and satellite "
    "navigation has reduced their importance, but many are still maintained as aids "
    "to navigation and as reminders of a long maritime history."
)

CODE = (
    "def quicksort(arr):\n"
    '    """Sort a list of numbers using the quicksort algorithm."""\n'
    "    if len(arr) <= 1:\n"
    "        return arr\n"
    "    pivot = arr[len(arr) // 2]\n"
    "    left = [x for x in arr if x < pivot]\n"
    "    middle = [x for x in arr if x == pivot]\n"
)

LONG = (
    "Apache License Version 2.0, January 2004 http://www.apache.org/licenses/\n"
    "\n"
    "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION\n"
    "\n"
    "1. Definitions.\n"
    "\n"
    '"License" shall mean the terms and conditions for use, reproduction, and distribution '
    "as defined by Sections 1 through 9 of this document.\n"
    "\n"
    '"Licensor" shall mean the copyright owner or entity authorized by the copyright '
    "owner that is granting the License.\n"
    "\n"
    '"Legal Entity" shall mean the union of the acting entity and all other entities '
    "that control, are controlled by, or are under common control with that entity. "
    'For the purposes of this definition, "control" means (i) the power, direct or indirect, '
    "to cause the direction or management of such entity, whether by contract or otherwise, "
    "or (ii) ownership of fifty percent (50%) or more of the outstanding shares, or "
    "(iii) beneficial ownership of such entity.\n"
    "\n"
    '"You" (or "Your") shall mean an individual or Legal Entity exercising permissions '
    "granted by this License.\n"
    "\n"
    '"Source" form shall mean the preferred form for making modifications, including '
    "but not limited to software source code, documentation source, and configuration "
    "files.\n"
    "\n"
    '"Object" form shall mean any form resulting from mechanical transformation or translation '
    "of a Source form, including but not limited to compiled object code, generated "
    "documentation, and conversions to other media types.\n"
    "\n"
    '"Work" shall mean the work of authorship, whether in Source or Object form, made '
    "available under the License, as indicated by a copyright notice that is included "
    "in or attached to the work (an example is provided in the Appendix below).\n"
    "\n"
    '"Derivative Works" shall mean any work, whether in Source or Object form, that '
    "is based on (or derived from) the Work and for which the editorial revisions, annotations, "
    "elaborations, or other modifications represent, as a whole, an original work of "
    "authorship. For the purposes of this License, Derivative Works shall not include "
    "works that remain separable from, or merely link (or bind by name) to the interfaces "
    "of, the Work and Derivative Works thereof.\n"
    "\n"
    '"Contribution" shall mean any work of authorship, including the original version '
    "of the Work and any modifications or additions to that Work or Derivative Works "
    "thereof, that is intentionally submitted to Licensor for inclusion in the Work "
    "by the copyright owner or by an individual or Legal Entity authorized to submit "
    'on behalf of the copyright owner. For the purposes of this definition, "submitted" '
    "means any form of electronic, verbal, or written communication sent to the Licensor "
    "or its representatives, including but not limited to communication on electronic "
    "mailing lists, source code control systems, and issue tracking systems that are "
    "managed by, or on behalf of, the Licensor for the purpose of discussing and improving "
    "the Work, but excluding communication that is conspicuously marked or otherwise "
    'designated in writing by the copyright owner as "Not a Contribution."\n'
    "\n"
    '"Contributor" shall mean Licensor and any individual or Legal Entity on behalf '
    "of whom a Contribution has been received by Licensor and subsequently incorporated "
    "within the Work.\n"
    "\n"
    "2. Grant of Copyright License. Subject to the terms and conditions of this License, "
    "each Contributor hereby grants to You a perpetual, worldwide, non-exclusive, no-charge, "
    "royalty-free, irrevocable copyright license to reproduce, prepare Derivative Works "
    "of, publicly display, publicly perform, sublicense, and distribute the Work and "
    "such Derivative Works in Source or Object form.\n"
    "\n"
    "3. Grant of Patent License. Subject to the terms and conditions of this License, "
    "each"
)

# name -> text; None for the chat prompt, which is rendered per model.
PROMPTS = {"short": SHORT, "chat": None, "paragraph": PARAGRAPH, "code": CODE, "long": LONG}

# The prompts of the synthetic architecture models (`golden/synth-<name>/logits.gguf`): text
# only (their tokenizer's chat template is not theirs), both longer than the models' sliding
# windows of 32 positions.
SYNTH_PROMPTS = {"paragraph": PARAGRAPH, "code": CODE}
