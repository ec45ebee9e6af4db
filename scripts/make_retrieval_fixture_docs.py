"""Grow the demo collection of group `retrieval` to a few hundred short documents, deterministically.

data/retrieval/documents.jsonl starts with hand-written documents (ids D...): three judged documents per
facet, one topical non-relevant page per topic (D30?x), off-topic pages (D900?) and one broken record.
This script appends generated documents (ids G...) and their qrels, replacing any earlier G... block:

- per facet, 4 more relevant pages (rel 1) written from sentences about that facet;
- per topic, 24 pages about the same topic but none of its facets (unjudged = not relevant): the
  first-phase BM25 has to separate these from the relevant pages on the words the dialogue adds;
- 80 off-topic pages.

Sentences are hand-written below; a seeded generator only picks and orders them, so rerunning the script
gives byte-identical files. Usage: .venv/bin/python scripts/make_retrieval_fixture_docs.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data" / "retrieval"

FACETS = {
    "F3011": ("Buying giant teddy bears", [
        "Jumbo teddy bears over five feet tall ship folded in a box and fluff up in a day.",
        "Compare prices of giant plush bears from online toy stores before you order.",
        "A huge stuffed bear makes a big birthday or Valentine gift; check the delivery time.",
        "Stores that sell oversized teddy bears usually offer several fur colours and sizes.",
        "Buy a life-size teddy bear online and read the reviews about stuffing and stitching.",
        "Giant bear shops list the height in feet: four, five, six or even eight feet tall.",
    ]),
    "F3012": ("Teddy bear history", [
        "The name teddy bear comes from President Theodore Roosevelt and a 1902 bear hunt.",
        "A Clifford Berryman cartoon of Roosevelt sparing a bear inspired the first toy bears.",
        "Morris Michtom sold the first teddy bears in his Brooklyn shop in 1903.",
        "The Steiff company in Germany made early jointed mohair bears, a key part of teddy bear history.",
        "Museums of toy history show how the teddy bear got its name and became popular.",
        "Early twentieth century teddy bears had long snouts, humped backs and glass eyes.",
    ]),
    "F3013": ("Washing a teddy bear", [
        "Wash a teddy bear by hand in cool water with a little mild detergent.",
        "Put a washable plush bear in a pillowcase and use the gentle cycle of the washing machine.",
        "Let a washed teddy bear air dry and brush the fur so it stays soft.",
        "Spot clean old or antique bears with a damp cloth instead of soaking them.",
        "Check the care label before you wash a stuffed bear; some cannot get wet.",
        "Baking soda sprinkled on the fur and brushed off cleans a teddy bear without water.",
    ]),
    "F3021": ("Radio-controlled planes", [
        "Buy radio-controlled planes, RC transmitters and batteries at our hobby store.",
        "Beginner RC airplanes with foam wings are sold ready to fly with a remote control.",
        "Hobby shops that sell radio-controlled aircraft also stock spare propellers and servos.",
        "Compare electric RC planes and gliders from online hobby stores.",
        "Our store carries remote control planes, trainers and flight simulators for new pilots.",
        "Where to buy RC planes near you: local hobby shops and flying clubs.",
    ]),
    "F3022": ("Model trains", [
        "Model train stores sell HO and N scale locomotives, track and scenery.",
        "Buy a starter model railroad set with an engine, cars and an oval of track.",
        "Hobby shops for model railways carry Lionel, Bachmann and Marklin trains.",
        "Find a model train store that repairs locomotives and sells used rolling stock.",
        "Online stores for model trains ship track packs, transformers and buildings.",
        "Model railroad shops stock miniature trees, stations and signals for layouts.",
    ]),
    "F3023": ("Knitting yarn shops", [
        "Yarn shops sell wool, cotton and acrylic yarn for knitting and crochet.",
        "Find a local knitting store with merino yarn, needles and pattern books.",
        "Online yarn stores ship hand-dyed skeins and knitting kits.",
        "Craft shops that sell knitting yarn often host knitting classes.",
        "Buy chunky yarn and circular knitting needles for a winter scarf.",
        "A yarn shop guide: fibres, weights and where to buy knitting supplies.",
    ]),
    "F3031": ("Wilson's disease symptoms", [
        "Symptoms of Wilson's disease include fatigue, jaundice and abdominal pain.",
        "Kayser-Fleischer rings, a brown ring around the cornea, are a sign of Wilson's disease.",
        "Copper build-up causes tremor, stiff muscles and trouble speaking in Wilson's disease.",
        "Psychiatric symptoms such as depression and mood swings can be early signs of Wilson's disease.",
        "Liver symptoms of Wilson's disease are swelling of the legs and a swollen belly.",
        "Doctors look for the symptoms of Wilson's disease in children and young adults.",
    ]),
    "F3032": ("Treating Wilson's disease", [
        "Wilson's disease is treated with chelating drugs such as penicillamine and trientine.",
        "Zinc acetate blocks copper absorption and is used as maintenance treatment for Wilson's disease.",
        "Treatment of Wilson's disease is lifelong and needs regular blood and urine tests.",
        "A liver transplant can treat Wilson's disease when the liver fails.",
        "Side effects of penicillamine treatment include rash and kidney problems.",
        "Doctors adjust the chelation therapy dose for Wilson's disease during pregnancy.",
    ]),
    "F3033": ("Wilson's disease diet", [
        "People with Wilson's disease should avoid foods high in copper such as shellfish and liver.",
        "Limit chocolate, nuts, mushrooms and dried fruit on a low copper diet.",
        "Check drinking water for copper when you have Wilson's disease.",
        "A dietitian can plan a low copper diet for Wilson's disease patients.",
        "Avoid vitamins and supplements that contain copper with Wilson's disease.",
        "Foods to avoid with Wilson's disease: organ meats, cashews, soy and cocoa.",
    ]),
    "F3041": ("Modern leather sofas", [
        "Modern leather sofas with clean lines and metal legs suit a minimalist living room.",
        "Shop top grain leather couches in black, brown and cognac.",
        "A modern leather sectional sofa is durable and easy to wipe clean.",
        "Compare Italian leather sofas from contemporary furniture stores.",
        "Buy a mid-century modern leather sofa with tufted cushions.",
        "Leather sofa buying guide: full grain versus bonded leather.",
    ]),
    "F3042": ("Sofa beds for small apartments", [
        "A compact sofa bed turns a small apartment living room into a guest room.",
        "Sleeper sofas with a memory foam mattress fit studio apartments.",
        "Buy a small futon or pull-out sofa bed for tight spaces.",
        "Apartment-size sofa beds under 70 inches wide fold out in seconds.",
        "Space-saving sofa beds with storage drawers for small flats.",
        "Compare click-clack sofa beds and pull-out sleepers for small rooms.",
    ]),
    "F3043": ("Cleaning velvet sofas", [
        "Clean a velvet sofa with a soft brush and a vacuum upholstery attachment.",
        "Remove stains from velvet upholstery with a little dish soap and water.",
        "Steam a velvet couch to lift crushed pile and refresh the fabric.",
        "Check the cleaning code on a velvet sofa: W, S or WS.",
        "Blot spills on velvet right away and never rub the fabric.",
        "How to clean a velvet sofa without leaving water marks.",
    ]),
    "F3051": ("Cost of installing solar panels", [
        "The cost to install solar panels on a house is about three dollars per watt.",
        "A typical home solar installation costs between fifteen and twenty-five thousand dollars.",
        "Federal tax credits reduce the cost of residential solar panel installation.",
        "Get quotes from solar installers and compare the price per watt.",
        "Solar panel installation cost depends on roof size, panel type and labour.",
        "Solar loans and leases spread the cost of rooftop solar over years.",
    ]),
    "F3052": ("How solar panels generate electricity", [
        "Solar panels generate electricity through the photovoltaic effect in silicon cells.",
        "Sunlight knocks electrons loose in a solar cell, creating direct current.",
        "An inverter converts the DC electricity from solar panels into AC for the home.",
        "Photovoltaic cells are made of layers of doped silicon that form an electric field.",
        "How solar panels work: photons, electrons and the flow of current.",
        "Solar cells produce more electricity in direct sunlight and at cooler temperatures.",
    ]),
    "F3061": ("Lake Tahoe ski resorts", [
        "Heavenly, Northstar and Palisades Tahoe are the largest ski resorts at Lake Tahoe.",
        "Lake Tahoe ski resorts sell lift tickets, lessons and season passes.",
        "Ski and snowboard at Tahoe resorts from December to April.",
        "Compare Lake Tahoe ski areas by slopes, snowfall and lift lines.",
        "Kirkwood and Sierra-at-Tahoe are ski resorts south of the lake.",
        "Family ski resorts around Lake Tahoe with beginner terrain.",
    ]),
    "F3062": ("Lake Tahoe hiking trails", [
        "Summer hiking trails around Lake Tahoe include Mount Tallac and Eagle Falls.",
        "Hike the Tahoe Rim Trail for views of the lake in summer.",
        "Easy Lake Tahoe trails for families: Rainbow Trail and Emerald Bay.",
        "Trail maps for summer hikes and backpacking around Lake Tahoe.",
        "The Desolation Wilderness west of Lake Tahoe has hiking trails to alpine lakes.",
        "Best time to hike Lake Tahoe trails is July to September after the snow melts.",
    ]),
}

TOPIC_OTHER = {  # same topic, none of its facets
    "301": ["Teddy bear collectors meet at fairs to trade rare bears.",
            "A teddy bear picnic is a popular game at children's parties.",
            "Sewing patterns let you make your own teddy bear at home.",
            "Teddy bears are given to children in hospitals to comfort them.",
            "Famous fictional bears include Winnie the Pooh and Paddington.",
            "Teddy bear museums exist in Korea, England and Florida.",
            "Knitted teddy bears are a classic charity craft project.",
            "Some teddy bears play music or talk when you press a paw."],
    "302": ["Hobby stores sell paints, brushes and canvases for artists.",
            "Board game shops host game nights for tabletop hobbyists.",
            "Scrapbooking hobby supplies include stickers and patterned paper.",
            "A hobby store gift card suits anyone who loves crafts.",
            "Coin collecting is a hobby with its own shops and fairs.",
            "Model kits of cars and ships need glue and fine paint.",
            "Hobby shops often close on Sundays in small towns.",
            "Drawing and sketching supplies for beginners at craft stores."],
    "303": ["Wilson's disease is a rare genetic disorder inherited from both parents.",
            "The ATP7B gene is mutated in people with Wilson's disease.",
            "Samuel Wilson described the disease in 1912.",
            "Wilson's disease affects about one in thirty thousand people.",
            "Genetic counselling helps families with a history of Wilson's disease.",
            "Research on Wilson's disease studies copper transport in cells.",
            "Support groups connect patients living with Wilson's disease.",
            "Wilson's disease is also called hepatolenticular degeneration."],
    "304": ["The word sofa comes from the Arabic word suffa.",
            "Sofa styles include chesterfield, camelback and lawson.",
            "Measure the door before a sofa is delivered.",
            "Throw pillows and blankets change the look of a sofa.",
            "Arrange a living room around the sofa and the television.",
            "Outdoor sofas use weather resistant cushions.",
            "Recycling an old sofa is possible at some waste centres.",
            "The history of the couch goes back to ancient Egypt."],
    "305": ["Solar farms cover large areas with rows of panels.",
            "Solar panels on satellites power spacecraft in orbit.",
            "Recycling old solar panels recovers glass and aluminium.",
            "Solar powered calculators use a tiny photovoltaic strip.",
            "Countries with the most solar capacity include China and the United States.",
            "Solar panel efficiency records are set in laboratories.",
            "Solar eclipses briefly reduce the output of solar power plants.",
            "Portable solar chargers keep phones running while camping."],
    "306": ["Lake Tahoe is the largest alpine lake in North America.",
            "The water of Lake Tahoe is famous for its clarity.",
            "Casinos line the Nevada side of Lake Tahoe.",
            "Lake Tahoe formed about two million years ago.",
            "Boat tours on Lake Tahoe visit Emerald Bay and Vikingsholm.",
            "Traffic to Lake Tahoe is heavy on holiday weekends.",
            "Lake Tahoe real estate prices have risen for years.",
            "Legends tell of a monster called Tessie living in Lake Tahoe."],
}
TOPIC_NAMES = {"301": "Teddy bears", "302": "Hobby stores", "303": "Wilson's disease", "304": "Sofas",
               "305": "Solar panels", "306": "Lake Tahoe"}

OFF_TOPIC = [
    "Bake bread with flour, water, salt and yeast, then let the dough rise.",
    "A marathon training plan builds mileage slowly over sixteen weeks.",
    "Tomatoes need sun, regular watering and a stake to support the stem.",
    "Replace a car battery by disconnecting the negative terminal first.",
    "The French Revolution began in 1789 with the storming of the Bastille.",
    "Learn Spanish with daily practice, flash cards and conversation.",
    "Dogs need daily walks, fresh water and regular visits to the vet.",
    "Paint a room by taping the edges and rolling on two coats.",
    "Jupiter is the largest planet in the solar system.",
    "Coffee beans are roasted light, medium or dark.",
    "A budget spreadsheet tracks income, rent and groceries.",
    "Chess openings include the Sicilian Defence and the Queen's Gambit.",
    "Photosynthesis turns light, water and carbon dioxide into sugar.",
    "Fix a leaking tap by replacing the washer.",
    "The Amazon rainforest spans nine countries in South America.",
    "Write a cover letter that matches the job description.",
    "Yoga for beginners starts with breathing and simple poses.",
    "Volcanoes erupt when magma rises through the crust.",
    "Save money on flights by booking early and flying midweek.",
    "Python is a programming language popular for data science.",
]
OFF_TITLES = ["Kitchen basics", "Fitness notes", "Garden tips", "Car care", "History notes", "Language learning",
              "Pet care", "Home improvement", "Astronomy facts", "Coffee guide", "Personal finance", "Chess notes",
              "Biology basics", "Plumbing", "Geography facts", "Careers", "Wellness", "Earth science", "Travel tips",
              "Programming"]


def generate(seed: int = 0) -> tuple[list[dict], list[str]]:
    rng = random.Random(seed)
    docs, qrels = [], []
    for facet, (title, bank) in FACETS.items():
        for j in range(4):
            text = " ".join(rng.sample(bank, 2))
            doc_id = f"G{facet[1:]}r{j + 1}"
            docs.append({"doc_id": doc_id, "title": f"{title} ({j + 1})", "text": text})
            qrels.append(f"{facet} 0 {doc_id} 1")
    for topic, bank in TOPIC_OTHER.items():
        for j in range(24):
            text = " ".join(rng.sample(bank, 2))
            docs.append({"doc_id": f"G{topic}o{j + 1:02d}", "title": f"{TOPIC_NAMES[topic]}: more", "text": text})
    for j in range(80):
        a, b = rng.sample(range(len(OFF_TOPIC)), 2)
        docs.append({"doc_id": f"G900o{j + 1:02d}", "title": OFF_TITLES[a], "text": f"{OFF_TOPIC[a]} {OFF_TOPIC[b]}"})
    return docs, qrels


def main() -> None:
    docs_path, qrels_path = DATA / "documents.jsonl", DATA / "qrels.txt"
    # keep the hand-written records (including the deliberately broken ones), drop an earlier generated block
    kept = [line for line in docs_path.read_text().splitlines() if not line.startswith('{"doc_id": "G')]
    kept_q = [line for line in qrels_path.read_text().splitlines() if " 0 G" not in line]
    docs, qrels = generate()
    broken = [line for line in kept if '"D999"' in line]  # the empty record stays last
    head = [line for line in kept if '"D999"' not in line]
    docs_path.write_text("\n".join(head + [json.dumps(d) for d in docs] + broken) + "\n")
    qrels_path.write_text("\n".join(kept_q + qrels) + "\n")
    print(f"{docs_path}: {len(head) + len(docs) + len(broken)} records ({len(docs)} generated); "
          f"{qrels_path}: {len(kept_q) + len(qrels)} lines ({len(qrels)} generated)")


if __name__ == "__main__":
    main()
