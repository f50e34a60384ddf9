#!/usr/bin/env python3
"""Writes data/corpus.txt: deterministic English-like prose (about 300 KB)
from a small hand-written grammar and vocabulary, so the demo and tests have a
corpus with real word and sentence structure and no licensing question.
Usage: generate-corpus.py [OUT] (default: corpus.txt next to this script)."""
import os
import random
import sys

SUBJECTS = ["the old miller", "a young sailor", "the village doctor", "my grandmother",
            "the blacksmith", "a quiet student", "the ferryman", "the schoolteacher",
            "a travelling merchant", "the shepherd", "her brother", "the baker",
            "an old friend", "the captain", "the gardener", "a small child"]
VERBS = ["walked along", "looked across", "spoke about", "wrote about", "remembered",
         "carried", "found", "mended", "painted", "watched", "followed", "praised",
         "visited", "described", "counted", "gathered"]
OBJECTS = ["the river", "the narrow bridge", "a field of barley", "the harbour",
           "the long road to town", "a letter from the city", "the winter stores",
           "the broken wheel", "the lighthouse", "the orchard", "an empty boat",
           "the church bells", "a basket of apples", "the evening sky",
           "the market square", "the forest path"]
ADVERBS = ["slowly", "carefully", "in the morning", "before dawn", "after supper",
           "without a word", "with great care", "once again", "in the rain",
           "at the end of summer", "all afternoon", "for many years"]
CLAUSES = ["because the weather had turned", "while the children slept",
           "as the bells rang across the valley", "although nobody had asked",
           "since the old road was closed", "when the first snow came",
           "until the lamps were lit", "so that nothing would be lost"]
REMARKS = ["It was a simple thing, and yet it mattered.",
           "Nobody in the village forgot that day.",
           "The work was hard, but the company was good.",
           "There is always more to learn than one expects.",
           "Such days are rare, and they pass quickly.",
           "Everyone agreed that it had been worth the trouble."]


def sentence(rng):
    text = f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}"
    if rng.random() < 0.6:
        text += f" {rng.choice(ADVERBS)}"
    if rng.random() < 0.4:
        text += f", {rng.choice(CLAUSES)}"
    return text[0].upper() + text[1:] + "."


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "corpus.txt")
    rng = random.Random(20240520)
    paragraphs, size = [], 0
    while size < 300_000:
        body = [sentence(rng) for _ in range(rng.randint(3, 7))]
        if rng.random() < 0.3:
            body.append(rng.choice(REMARKS))
        paragraph = " ".join(body)
        paragraphs.append(paragraph)
        size += len(paragraph) + 2
    with open(out, "w", encoding="ascii") as f:
        f.write("\n\n".join(paragraphs) + "\n")


if __name__ == "__main__":
    main()
