"""A seeded corpus for the search benchmark: companion memories and labelled queries.

`companion_memory(rng, n)` builds a valid "companion" document of 60-120 items (to-dos, goals,
events, occupation, preferences, languages, skills, pain points, wins, feedback ...). Each
to-do, goal and event is a *concept* drawn at most once per user, written in one of several
phrasings (synonyms: "Book a dentist appointment", "Schedule a dental checkup"), with a detail
clause drawn from a pool, so users share vocabulary without sharing texts.

`labelled_queries(rng, users, n)` draws queries over those users, each naming the one item of
one user it should find, in four categories:
  exact        two or three of the item's own words (the rarest ones within that user's items)
  morph        the same words in another form where a safe rule applies ("passports", "serviced")
  typo         the same words, each of five letters or more misspelled once
  paraphrase   a hand-written rephrasing that shares no content word with any phrasing of the
               concept ("get my teeth looked at" for a dentist appointment)
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any

from user_memory.domain.companion.items import document_items
from user_memory.domain.memory.document import empty_document, validate_document


@dataclass(frozen=True)
class Concept:
    key: str
    phrasings: tuple[str, ...]
    paraphrases: tuple[str, ...]


def _c(key: str, phrasings: str, paraphrases: str) -> Concept:
    return Concept(key, tuple(phrasings.split(" | ")), tuple(paraphrases.split(" | ")))


TODOS = [
    _c(
        "passport",
        "Renew my passport | Get the passport renewed | Apply for a passport renewal",
        "new travel document before it expires | travel ID expiring soon",
    ),
    _c(
        "dentist",
        "Book a dentist appointment | Schedule a dental checkup | Call the dentist for a cleaning",
        "get my teeth looked at | tooth doctor visit",
    ),
    _c(
        "taxes",
        "File the income tax return | Submit the tax declaration | Finish the tax filing",
        "paperwork for the revenue office | yearly government forms about earnings",
    ),
    _c(
        "car_service",
        "Take the car in for a service | Book the car maintenance | Get the car serviced",
        "vehicle needs a mechanic | oil change and brake check",
    ),
    _c(
        "groceries",
        "Buy groceries for the week | Do the weekly grocery shopping | Order groceries online",
        "stock up the fridge and pantry | food run to the supermarket",
    ),
    _c(
        "birthday_gift",
        "Buy a birthday present for my sister | Find a birthday gift for my sister",
        "something nice for her special day | surprise for a sibling turning a year older",
    ),
    _c(
        "insurance",
        "Compare home insurance quotes | Renew the home insurance policy | Switch home insurance provider",
        "cover for the house | protection plan for the flat",
    ),
    _c(
        "gym",
        "Cancel the gym membership | Pause my gym subscription | Freeze the gym contract",
        "stop paying for the fitness club | end the workout club plan",
    ),
    _c(
        "laundry",
        "Do the laundry | Wash and fold the clothes | Run the washing machine",
        "clean outfits for the week | sort dirty garments",
    ),
    _c(
        "plumber",
        "Call a plumber about the leaking sink | Fix the dripping kitchen tap | Get the sink leak repaired",
        "water escaping under the basin | faucet won't stop running",
    ),
    _c(
        "vet",
        "Take the dog to the vet | Book a vet appointment for the cat | Get the pet vaccinated",
        "animal doctor checkup | shots for the puppy",
    ),
    _c(
        "bank",
        "Open a savings account | Set up a high interest savings account | Move money into savings",
        "put cash aside at the bank | stash for rainy days",
    ),
    _c(
        "resume",
        "Update my resume | Rewrite the CV | Polish the resume for applications",
        "refresh the job history document | career summary for recruiters",
    ),
    _c(
        "flight",
        "Book flights to Lisbon | Buy plane tickets for the Lisbon trip | Reserve the flight to Lisbon",
        "air travel to Portugal | seats on an airliner to Portugal",
    ),
    _c(
        "hotel",
        "Reserve a hotel in Rome | Book accommodation in Rome | Find a place to stay in Rome",
        "somewhere to sleep in Italy | lodging for the Italian holiday",
    ),
    _c(
        "mother_call",
        "Call mom on Sunday | Phone my mother this weekend | Ring mum for a catch up",
        "talk to my parent | check in with the family",
    ),
    _c(
        "doctor_bloodwork",
        "Get blood work done | Schedule a blood test | Go to the lab for bloodwork",
        "medical screening with needles | check cholesterol levels",
    ),
    _c(
        "prescription",
        "Refill my prescription | Pick up the prescription at the pharmacy | Renew the medication",
        "get more pills from the chemist | collect my meds",
    ),
    _c(
        "bike_repair",
        "Fix the flat tire on my bike | Repair the bicycle puncture | Patch the bike tyre",
        "cycle has a deflated wheel | two-wheeler needs a new tube",
    ),
    _c(
        "declutter",
        "Declutter the garage | Clear out the garage | Sort the junk in the garage",
        "get rid of old stuff | tidy the storage space and donate things",
    ),
    _c(
        "thank_you",
        "Write thank you notes | Send thank you cards | Write notes of thanks",
        "express gratitude in writing | letters of appreciation",
    ),
    _c(
        "budget",
        "Review the monthly budget | Go over my spending | Track the monthly expenses",
        "see where the money went | check outgoings and finances",
    ),
    _c(
        "haircut",
        "Book a haircut | Get a haircut | Schedule the barber",
        "trim at the salon | hair is getting too long",
    ),
    _c(
        "visa",
        "Apply for the work visa | Submit the visa application | Gather documents for the visa",
        "permit to be employed abroad | immigration paperwork",
    ),
    _c(
        "wedding_rsvp",
        "RSVP to the wedding | Reply to the wedding invitation | Confirm attendance at the wedding",
        "answer the marriage ceremony invite | let the couple know if I can come",
    ),
    _c(
        "course",
        "Sign up for the online Python course | Enroll in a Python class | Register for the coding bootcamp",
        "learn programming on the internet | study software development",
    ),
    _c(
        "library",
        "Return the library books | Take the books back to the library | Renew the library loan",
        "overdue reading material | borrowed novels due",
    ),
    _c(
        "paint",
        "Paint the bedroom walls | Repaint the spare room | Buy paint for the bedroom",
        "new colour for where I sleep | redecorate the sleeping area",
    ),
    _c(
        "smoke_alarm",
        "Replace the smoke alarm batteries | Test the smoke detectors | Change the smoke alarm battery",
        "fire safety beeping device | ceiling sensor chirping",
    ),
    _c(
        "recycling",
        "Take out the recycling | Put the recycling bins out | Sort the recycling",
        "plastic and paper collection day | empty the blue container",
    ),
    _c(
        "meal_prep",
        "Meal prep lunches for the week | Cook lunches in advance | Prepare lunches on Sunday",
        "batch of dishes for workdays | boxes of food ready ahead",
    ),
    _c(
        "warranty",
        "Register the laptop warranty | Claim the warranty on the broken headphones",
        "manufacturer guarantee for electronics | get the faulty gadget replaced for free",
    ),
    _c(
        "subscription",
        "Cancel the streaming subscription | Unsubscribe from the video streaming service",
        "stop the monthly TV app payment | end the movie app plan",
    ),
    _c(
        "landlord",
        "Email the landlord about the heating | Tell the landlord the radiator is broken",
        "message the property owner: no warmth | flat is cold and needs fixing",
    ),
    _c(
        "doctor_knee",
        "See a doctor about my knee pain | Book a physiotherapist for the knee",
        "joint hurts when walking | leg injury checkup",
    ),
    _c(
        "photos",
        "Back up the phone photos | Organize the photo library | Print the holiday photos",
        "save pictures to the cloud | sort snapshots from the trip",
    ),
    _c(
        "password",
        "Change the email password | Set up a password manager | Enable two factor authentication",
        "secure my online accounts | better login security",
    ),
    _c(
        "moving",
        "Pack boxes for the move | Book a moving van | Hire movers for the relocation",
        "shifting to a new apartment | transport furniture to the new place",
    ),
    _c(
        "volunteer",
        "Sign up to volunteer at the food bank | Volunteer at the animal shelter on Saturday",
        "give time to charity | help out the community for free",
    ),
    _c(
        "garden",
        "Plant tomatoes in the garden | Weed the vegetable patch | Water the garden beds",
        "grow veggies in the backyard | look after the greenery outside",
    ),
    _c(
        "appliance",
        "Fix the broken dishwasher | Get the fridge repaired | Replace the microwave",
        "kitchen machine stopped working | household device is faulty",
    ),
    _c(
        "license",
        "Renew the driving licence | Book the driving test | Update the address on my driving license",
        "permit to operate a car | motor vehicle card",
    ),
    _c(
        "presentation",
        "Prepare slides for the quarterly review | Finish the presentation deck",
        "visuals for the team meeting | slideshow for work",
    ),
    _c(
        "invoice",
        "Send invoices to clients | Chase the unpaid invoice | Bill the client for March",
        "get paid for freelance work | request payment from customers",
    ),
    _c(
        "eye_test",
        "Book an eye exam | Get new glasses | Schedule an eye test at the optician",
        "check my vision | spectacles prescription",
    ),
    _c(
        "charity_run",
        "Register for the charity fun run | Sign up for the charity 5k",
        "jog for a good cause | fundraising race",
    ),
    _c(
        "mortgage",
        "Compare mortgage rates | Book a meeting with the mortgage adviser | Refinance the mortgage",
        "home loan interest | borrowing to buy property",
    ),
    _c(
        "neighbor",
        "Return the ladder to the neighbour | Give the drill back to the neighbor",
        "hand over the borrowed tool next door | hand over what the people nearby lent me",
    ),
    _c(
        "shoes",
        "Buy new running shoes | Replace the worn out trainers | Get new sneakers",
        "footwear for jogging | kicks for exercise",
    ),
    _c(
        "wifi",
        "Call the internet provider about slow wifi | Upgrade the broadband plan | Reset the wifi router",
        "connection keeps dropping at home | faster web at the house",
    ),
    _c(
        "will",
        "Write a will | Update the will with a lawyer | Sort out the estate paperwork",
        "what happens to my things after I die | legal document for inheritance",
    ),
]

GOALS = [
    _c(
        "marathon",
        "Run a half marathon | Finish a marathon | Train for a half marathon",
        "long distance race of twenty one kilometres | endurance jogging event",
    ),
    _c(
        "spanish",
        "Learn Spanish | Become conversational in Spanish | Reach B2 level in Spanish",
        "speak the language of Spain and Mexico | hablar espanol fluently",
    ),
    _c("weight", "Lose ten kilos | Get down to a healthy weight | Drop fifteen pounds", "slimmer body | shed some fat"),
    _c(
        "emergency_fund",
        "Save an emergency fund | Build six months of savings | Put aside a safety net fund",
        "cash cushion for bad times | money for unexpected expenses",
    ),
    _c(
        "promotion",
        "Get promoted to senior engineer | Earn a promotion at work | Move into a lead role",
        "climb the career ladder | higher title and salary",
    ),
    _c(
        "guitar",
        "Learn to play guitar | Practice guitar every day | Play ten songs on the guitar",
        "strum chords on a six string | make music with an instrument",
    ),
    _c(
        "reading",
        "Read twenty books this year | Read more books | Finish a book every month",
        "get through a pile of novels | spend time with literature",
    ),
    _c(
        "meditation",
        "Meditate every morning | Build a daily meditation habit | Practice mindfulness daily",
        "sit quietly and breathe | calm the mind each day",
    ),
    _c(
        "house",
        "Buy a house | Save for a house deposit | Own a home by next year",
        "get on the property ladder | a place that belongs to me",
    ),
    _c(
        "debt",
        "Pay off the credit card debt | Clear my student loans | Become debt free",
        "owe nothing to lenders | zero balance owed",
    ),
    _c(
        "sleep",
        "Sleep eight hours a night | Go to bed before eleven | Fix my sleep schedule",
        "proper rest after dark | stop staying up late",
    ),
    _c(
        "cooking",
        "Learn to cook Thai food | Cook dinner at home five nights a week | Master baking bread",
        "make meals myself | get better in the kitchen",
    ),
    _c(
        "side_business",
        "Launch an online shop | Start a side business | Grow the freelance design business",
        "earn extra income on my own | entrepreneurial project",
    ),
    _c(
        "climbing",
        "Climb a 6b route | Go bouldering twice a week | Lead climb outdoors",
        "get up the rock wall | vertical sport at the gym",
    ),
    _c(
        "writing",
        "Write a novel | Publish a short story | Write five hundred words a day",
        "finish my manuscript | creative fiction project",
    ),
    _c(
        "swim",
        "Swim a mile without stopping | Learn front crawl | Swim three times a week",
        "laps in the pool | get better in the water",
    ),
    _c(
        "screen_time",
        "Cut social media to thirty minutes a day | Reduce screen time | Take a digital detox",
        "less scrolling on the phone | unplug from apps",
    ),
    _c(
        "certification",
        "Pass the AWS certification | Get the project management certificate | Pass the CPA exam",
        "professional qualification test | credential for my career",
    ),
    _c(
        "travel_japan",
        "Visit Japan | Travel around Japan for two weeks | See the cherry blossoms in Kyoto",
        "trip to Tokyo and Osaka | holiday in the land of the rising sun",
    ),
    _c(
        "volunteering",
        "Volunteer once a month | Mentor a junior colleague | Give back to the community",
        "help others without pay | support people who need it",
    ),
    _c(
        "retirement",
        "Max out retirement contributions | Grow the pension pot | Invest for retirement",
        "money for when I stop working | old age nest egg",
    ),
    _c(
        "friends",
        "Make new friends in the city | Join a club to meet people | See friends every week",
        "build a social circle | feel less lonely",
    ),
]

EVENTS = [
    _c(
        "wedding",
        "Cousin's wedding | Best friend's wedding | Wedding of my college roommate",
        "marriage ceremony I am invited to | nuptials celebration",
    ),
    _c(
        "conference",
        "Tech conference in Berlin | Annual developer conference | Product design summit",
        "industry gathering with talks | professional convention",
    ),
    _c(
        "concert",
        "Concert at the arena | Jazz concert downtown | Live music show",
        "band playing on stage | gig tickets",
    ),
    _c(
        "dentist_visit",
        "Dentist appointment | Dental cleaning | Orthodontist check",
        "teeth examined at the clinic | oral hygiene visit",
    ),
    _c(
        "performance_review",
        "Performance review with my manager | Annual appraisal | Quarterly one on one",
        "feedback meeting with the boss | evaluation at work",
    ),
    _c(
        "book_club",
        "Book club meeting | Monthly reading group | Literary circle",
        "discuss a novel with others | readers gathering",
    ),
    _c(
        "parent_teacher",
        "Parent teacher conference | School meeting about my son | Parents evening",
        "talk with the kid's educator | how my kid is doing in class",
    ),
    _c(
        "anniversary",
        "Wedding anniversary dinner | Anniversary celebration | Date night for our anniversary",
        "celebrate years together with my partner | romantic evening out",
    ),
    _c(
        "job_interview",
        "Job interview at the startup | Final round interview | Technical interview",
        "meeting with a potential employer | hiring conversation",
    ),
    _c(
        "flight_event",
        "Flight to Lisbon | Flight home for the holidays | Red eye flight to New York",
        "plane departure | airport trip",
    ),
    _c(
        "yoga",
        "Yoga class | Hot yoga session | Morning yoga at the studio",
        "stretching and breathing workout | mat exercise lesson",
    ),
    _c(
        "team_offsite",
        "Team offsite | Company retreat | Department planning day",
        "colleagues away from the office | work trip with all my coworkers",
    ),
    _c(
        "doctor_event",
        "Annual physical with the GP | Doctor checkup | Follow up with the cardiologist",
        "medical appointment | health examination",
    ),
    _c(
        "football",
        "Football match at the stadium | Five a side football | Watch the cup final",
        "soccer game | kick a ball around with mates",
    ),
    _c(
        "birthday_party",
        "Birthday party at the bowling alley | Surprise birthday party | Kid's birthday party",
        "celebration of someone turning older | cake and candles gathering",
    ),
    _c(
        "therapy",
        "Therapy session | Counselling appointment | Session with the psychologist",
        "talk about my feelings with a professional | mental health support",
    ),
    _c(
        "move_day",
        "Moving day | Move into the new apartment | Handover of keys for the flat",
        "relocation to another home | shifting house",
    ),
    _c(
        "marathon_race",
        "Half marathon race | City marathon | Trail race in the hills",
        "long running competition | endurance event on foot",
    ),
    _c("exam", "Final exam | Certification exam | Driving test", "assessment I must pass | graded assessment"),
    _c(
        "volunteer_shift",
        "Volunteer shift at the food bank | Shelter volunteering | Charity fundraiser",
        "unpaid help for a good cause | giving back session",
    ),
    _c(
        "graduation",
        "Graduation ceremony | Niece's graduation | Commencement",
        "finishing school celebration | diploma day",
    ),
    _c(
        "car_inspection",
        "Car inspection | MOT test for the car | Vehicle safety check",
        "yearly look at the automobile | roadworthiness certificate",
    ),
    _c(
        "haircut_event",
        "Haircut at the salon | Barber appointment | Hair colouring",
        "trim and style | hairdresser visit",
    ),
    _c(
        "dinner_party",
        "Dinner party at our place | Potluck with the neighbours | Supper club",
        "hosting friends for a meal | evening of food with guests",
    ),
]

DETAILS = [
    "before the end of the month",
    "this weekend",
    "by Friday",
    "after work",
    "before the trip",
    "when payday comes",
    "first thing Monday",
    "if it rains",
    "with my partner",
    "for the family",
    "before winter",
    "next week",
    "on the way home",
    "during lunch break",
    "before the deadline",
    "as soon as possible",
    "after the holidays",
    "with the kids",
    "for the new flat",
    "early in the morning",
]
PLACES = ["Lisbon", "Porto", "Berlin", "Madrid", "Toronto", "Austin", "Leeds", "Dublin", "Oslo", "Lyon"]
OCCUPATIONS = [
    ("pediatric nurse", "children's hospital caregiver"),
    ("software engineer", "person who writes computer programs"),
    ("high school teacher", "educator of teenagers"),
    ("accountant", "bookkeeper handling company finances"),
    ("electrician", "tradesperson who wires buildings"),
    ("graphic designer", "visual artist making logos"),
    ("pharmacist", "dispenses medicine at a chemist"),
    ("chef", "professional cook in a restaurant"),
    ("civil engineer", "designs bridges and roads"),
    ("data analyst", "crunches numbers in spreadsheets"),
    ("lawyer", "attorney practicing law"),
    ("carpenter", "builds furniture from wood"),
    ("marketing manager", "runs advertising campaigns"),
    ("physiotherapist", "rehabilitates injured muscles"),
    ("journalist", "reporter writing news stories"),
    ("architect", "plans the shape of buildings"),
    ("police officer", "law enforcement on patrol"),
    ("veterinarian", "doctor for animals"),
    ("truck driver", "hauls freight on highways"),
    ("barista", "makes espresso drinks at a cafe"),
]
SKILLS = [
    "python programming",
    "public speaking",
    "woodworking",
    "photography",
    "excel spreadsheets",
    "conversational Portuguese",
    "first aid",
    "negotiation",
    "video editing",
    "sewing",
    "baking sourdough",
    "project management",
    "touch typing",
    "knitting",
    "salsa dancing",
    "car mechanics",
    "calligraphy",
    "SQL queries",
    "chess",
    "gardening",
    "sign language",
    "watercolour painting",
    "copywriting",
    "budget forecasting",
    "rock climbing",
    "piano",
    "bread making",
    "interior design",
    "3d printing",
    "pottery",
]
PAIN_POINTS = [
    ("night shifts wreck my sleep", "exhausted from working late hours"),
    ("long commute every day", "hours lost travelling to the office"),
    ("back pain from sitting at a desk", "spine aches after office work"),
    ("procrastinating on big tasks", "keep putting off important jobs"),
    ("anxious before meetings", "nervous when talking to the team"),
    ("spending too much on takeaway food", "delivery meals eat my budget"),
    ("noisy upstairs neighbours", "loud people living above me"),
    ("too many unread emails", "inbox overload"),
    ("struggling to wake up early", "mornings are hard for me"),
    ("migraines in the afternoon", "headaches later in the day"),
    ("feeling isolated working remotely", "lonely at the home office"),
    ("rent keeps going up", "housing costs rising"),
    ("knee hurts when running", "joint ache while jogging"),
    ("no time for hobbies", "life too busy for fun"),
    ("stressed about money", "financial worries"),
    ("forgetting birthdays", "missing important dates of friends"),
]
FOOD = [
    "spicy ramen",
    "sourdough bread",
    "vegan curry",
    "sushi",
    "dark chocolate",
    "green tea",
    "tacos",
    "mediterranean salads",
    "black coffee",
    "pho",
    "cheesecake",
    "falafel wraps",
    "grilled fish",
    "oat milk",
]
MUSIC = [
    "jazz piano",
    "indie rock",
    "classical symphonies",
    "hip hop",
    "bossa nova",
    "techno",
    "folk ballads",
    "film soundtracks",
    "k-pop",
    "blues guitar",
]
HOBBIES = [
    "hiking in the mountains",
    "board games",
    "birdwatching",
    "trail running",
    "crossword puzzles",
    "camping",
    "film photography",
    "home brewing",
    "vinyl collecting",
    "fishing",
    "cycling",
    "surfing",
]
LANGUAGES = ["English", "Portuguese", "Spanish", "French", "German", "Italian", "Japanese", "Mandarin", "Arabic"]
TRAVEL = ["backpacking", "city breaks", "road trips", "beach resorts", "slow travel by train", "cruises"]
MOODS = ["optimistic", "tired but hopeful", "stressed", "calm", "restless", "motivated", "overwhelmed"]
FOCUS = ["health", "career growth", "family time", "saving money", "learning", "fitness", "creativity", "sleep"]
WINS = [
    "finished the first 10k run",
    "got a raise",
    "cooked dinner every night this week",
    "passed the driving test",
    "cleared the inbox",
    "fixed the bike myself",
    "read three books last month",
    "kept the budget",
]
LOSSES = [
    "missed the deadline at work",
    "skipped the gym all week",
    "argued with a friend",
    "overspent on clothes",
    "lost my keys again",
]
FEEDBACK = [
    "likes short answers",
    "prefers reminders in the morning",
    "wants fewer notifications",
    "enjoys weekly summaries",
    "dislikes motivational quotes",
    "asks for step by step plans",
]
EDUCATION = [
    "bachelor's degree in biology",
    "master's in computer science",
    "nursing diploma",
    "high school diploma",
    "apprenticeship in carpentry",
    "MBA",
    "PhD in chemistry",
]
TIMEZONES = ["Europe/Lisbon", "Europe/Berlin", "America/New_York", "America/Toronto", "Asia/Tokyo", "Europe/London"]
ATTRIBUTES = {
    "diet": ["vegetarian", "pescatarian", "gluten free", "no restrictions"],
    "pets": ["a golden retriever", "two cats", "a parrot", "no pets"],
    "living situation": ["lives with partner", "shares a flat", "lives alone", "lives with parents"],
    "chronotype": ["early bird", "night owl"],
}

STATUS_TODO = ["open", "open", "open", "in_progress", "done"]


def _text(rng: random.Random, concept: Concept) -> str:
    text = rng.choice(concept.phrasings)
    if rng.random() < 0.7:
        text += " " + rng.choice(DETAILS)
    return text


def _day(rng: random.Random) -> str:
    return f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"


def companion_memory(rng: random.Random) -> tuple[dict[str, Any], dict[str, str]]:
    """A valid companion document of 60-120 items, and each element's concept key by path."""
    doc = empty_document("companion")
    concepts: dict[str, str] = {}
    target = rng.randint(60, 120)
    n_todos = min(len(TODOS), max(10, int(target * rng.uniform(0.3, 0.4))))
    n_goals = rng.randint(5, min(len(GOALS), 5 + target // 12))
    n_events = rng.randint(6, min(len(EVENTS), 6 + target // 10))
    for concept in rng.sample(GOALS, n_goals):
        gid = f"g_{concept.key}"
        doc["goals"][gid] = {
            "id": gid,
            "title": rng.choice(concept.phrasings),
            "category": rng.choice(FOCUS),
            "status": rng.choice(["active", "active", "paused"]),
            "target_date": _day(rng),
        }
        concepts[f"/goals/{gid}"] = concept.key
    for concept in rng.sample(TODOS, n_todos):
        tid = f"t_{concept.key}"
        todo: dict[str, Any] = {"id": tid, "text": _text(rng, concept), "status": rng.choice(STATUS_TODO)}
        if rng.random() < 0.6:
            todo["due_date"] = _day(rng)
        if rng.random() < 0.3:
            todo["tags"] = rng.sample(FOCUS, 2)
        doc["todos"][tid] = todo
        concepts[f"/todos/{tid}"] = concept.key
    for concept in rng.sample(EVENTS, n_events):
        eid = f"e_{concept.key}"
        event: dict[str, Any] = {"id": eid, "summary": rng.choice(concept.phrasings), "start": _day(rng)}
        if rng.random() < 0.5:
            event["location"] = rng.choice(PLACES)
        doc["events"][eid] = event
        concepts[f"/events/{eid}"] = concept.key
    occupation = rng.choice(OCCUPATIONS)
    advanced = doc["advanced_info"]
    advanced["occupation"] = occupation[0]
    advanced["preferences"] = {
        "food": rng.sample(FOOD, rng.randint(2, 5)),
        "music": rng.sample(MUSIC, rng.randint(1, 4)),
        "hobbies": rng.sample(HOBBIES, rng.randint(2, 5)),
    }
    advanced["languages"] = rng.sample(LANGUAGES, rng.randint(1, 3))
    advanced["travel_styles"] = rng.sample(TRAVEL, rng.randint(1, 2))
    advanced["other_attributes"] = {k: rng.choice(v) for k, v in ATTRIBUTES.items() if rng.random() < 0.7}
    doc["basic_info"]["timezone"] = rng.choice(TIMEZONES)
    state = doc["current_state"]
    state["education"] = rng.choice(EDUCATION)
    state["mood"] = rng.choice(MOODS)
    state["focus_areas"] = rng.sample(FOCUS, rng.randint(1, 3))
    state["pain_points"] = [p[0] for p in rng.sample(PAIN_POINTS, rng.randint(2, 5))]
    state["recent_wins"] = rng.sample(WINS, rng.randint(1, 3))
    state["recent_losses"] = rng.sample(LOSSES, rng.randint(0, 2))
    doc["feedback"]["positives"] = rng.sample(FEEDBACK, 2)
    # Fill up to the target with skills (a list of leaves).
    count = len(document_items(validate_document(doc, "companion")))
    state["skills"] = rng.sample(SKILLS, max(2, min(len(SKILLS), target - count)))
    if count + len(state["skills"]) < 60:  # still short: more to-dos (only concepts not used yet)
        unused = [c for c in TODOS if f"/todos/t_{c.key}" not in concepts]
        for concept in rng.sample(unused, min(len(unused), 60 - count - len(state["skills"]))):
            tid = f"t_{concept.key}"
            doc["todos"][tid] = {"id": tid, "text": _text(rng, concept)}
            concepts[f"/todos/{tid}"] = concept.key
    for path, p in [("/advanced_info/occupation", occupation)]:
        concepts[path] = "occupation:" + p[0]
    for i, point in enumerate(state["pain_points"]):
        concepts[f"/current_state/pain_points/{i}"] = "pain:" + point
    return validate_document(doc, "companion"), concepts


# -- queries ---------------------------------------------------------------------------------------

_WORD = re.compile(r"[A-Za-z][A-Za-z']+")
_STOP = frozenset(
    re.findall(
        r"\w+",
        "a an and the my to of for in on at by with this that is be it its me our your from up into out "
        "todo goal event leaf entry get do go go's",
    )
)
CONCEPTS = {c.key: c for c in TODOS + GOALS + EVENTS}
PARAPHRASES = {
    **{c.key: c.paraphrases for c in CONCEPTS.values()},
    **{"occupation:" + o: (p,) for o, p in OCCUPATIONS},
    **{"pain:" + o: (p,) for o, p in PAIN_POINTS},
}
CATEGORIES = ("exact", "morph", "typo", "paraphrase")


@dataclass(frozen=True)
class Query:
    category: str
    user: int  # index into the users list
    text: str
    relevant: tuple[str, ...]


def content_words(text: str) -> list[str]:
    """The lower-cased words of an item's text (its kind label left out) worth searching for."""
    words = [w.lower() for w in _WORD.findall(text.split(":", 1)[-1])]
    return [w for w in words if w not in _STOP and len(w) >= 3]


# Words of the detail clauses and tags: shared by many items, so never what a query names.
_FILLER = frozenset(w for phrase in DETAILS + FOCUS for w in content_words(phrase))
_PROPER = frozenset(w.lower() for w in PLACES + LANGUAGES)


def inflect(word: str) -> str | None:
    """Another form of the word (plural/singular, -ing/-ed), or None when no safe rule applies."""
    if word in _PROPER or word.endswith(("ous", "us", "is", "ss", "ly")):
        return None
    if word.endswith("ing") and len(word) > 6:
        base = word[:-3]
        return base[:-1] if len(base) > 2 and base[-1] == base[-2] else base
    if word.endswith("ed") and len(word) > 5:
        return word[:-2] + "ing" if word[-3] == "t" else word[:-1] + "s"
    if word.endswith("ies"):
        return word[:-3] + "y"
    if word.endswith("s") and len(word) > 4:
        return word[:-1]
    if word.endswith("y") and word[-2] not in "aeiou":
        return word[:-1] + "ies"
    if word.endswith(("ch", "sh", "x")):
        return word + "es"
    if word.endswith("e") and len(word) > 4:
        return word[:-1] + "ing"
    return word + "s"


def typo(rng: random.Random, word: str) -> str:
    """The word with one slip: a letter dropped, doubled, swapped with its neighbour or replaced."""
    i = rng.randrange(1, len(word) - 1)
    how = rng.choice(("drop", "double", "swap", "replace"))
    if how == "drop":
        return word[:i] + word[i + 1 :]
    if how == "double":
        return word[:i] + word[i] + word[i:]
    if how == "swap" and word[i] != word[i + 1]:
        return word[:i] + word[i + 1] + word[i] + word[i + 2 :]
    letters = "abcdefghijklmnopqrstuvwxyz".replace(word[i], "")
    return word[:i] + rng.choice(letters) + word[i + 1 :]


def _distinctive(rng: random.Random, target: str, others: list[str], n: int) -> list[str]:
    """Up to n words of the target text (no detail or tag words), those fewest other items share first."""
    words = [w for w in dict.fromkeys(content_words(target)) if w not in _FILLER]
    counts = {w: sum(1 for o in others if w in o.split()) for w in words}
    rng.shuffle(words)
    words.sort(key=lambda w: counts[w])
    return words[:n]


def labelled_queries(
    rng: random.Random, users: list[tuple[dict[str, Any], dict[str, str]]], per_category: int
) -> list[Query]:
    """`per_category` queries in each category, each over one user and naming the item to find."""
    queries: list[Query] = []
    for category in CATEGORIES:
        made = 0
        while made < per_category:
            u = rng.randrange(len(users))
            doc, concepts = users[u]
            items = document_items(doc)
            path = rng.choice(sorted(concepts))
            target = items[path].text
            others = [" ".join(content_words(i.text)) for p, i in items.items() if p != path]
            if category == "paraphrase":
                text = rng.choice(PARAPHRASES[concepts[path]])
            else:
                words = _distinctive(rng, target, others, rng.choice((2, 3)))
                if not words:
                    continue
                if category == "morph":
                    forms = [inflect(w) for w in words]
                    if not any(forms):
                        continue
                    words = [f or w for f, w in zip(forms, words, strict=True)]
                elif category == "typo":
                    if not any(len(w) >= 5 for w in words):
                        continue
                    words = [typo(rng, w) if len(w) >= 5 else w for w in words]
                text = " ".join(words)
            queries.append(Query(category, u, text, (path,)))
            made += 1
    return queries
