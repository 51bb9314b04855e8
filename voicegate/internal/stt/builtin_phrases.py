"""The phrases the offline default speech model is built from: what callers say to the built-in agent.

Names, plans, colours and numbers are crossed with the sentence shapes, so "my name is Priya" and
"call me Sam" are recognised even though no one wrote those exact lines. Deployers replace all of
this with `[pocketsphinx] phrases` or `grammar`.
"""

from __future__ import annotations

NAMES = ("sam alice bob carol dave eve frank grace heidi ivan judy mallory oscar peggy trent victor walter "
         "anna ben chris daniel emma george hannah jack james john kate laura lucy mark mary michael nina "
         "olivia paul peter rachel robert sarah sophie thomas tom william priya raj wei li maria jose").split()
PLANS = "enterprise basic pro premium free business starter family".split()
COLOURS = "red blue green yellow black white purple orange pink".split()
NUMBERS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
           "twenty thirty forty fifty hundred").split()
DAYS = "monday tuesday wednesday thursday friday saturday sunday today tomorrow yesterday".split()

SENTENCES = """
hello
hi
hi there
hello there
good morning
good afternoon
good evening
how are you
how are you today
i am fine thanks
what time is it
what is the time
what's the time
tell me the time
what day is it
what is the date today
what's the date
repeat after me
say hello
say hello world
repeat after me hello world
can you repeat that
say that again
please repeat
keep your answers short
keep it short
keep your replies shorter
keep your replies shorter from now on
be brief
please be brief
speak more slowly
call yourself skiff
call yourself skiff from now on
what do you remember about me
what do you know about me
what is my name
do you remember me
forget that
forget my name
forget everything
forget that i like coffee
remember that i like coffee
remember that i like tea
remember that i prefer email
remember that my birthday is in june
remember that i have a dog
i like coffee
i have a dog
i want to book a table
i want to book a table for two
i would like to book an appointment
i need help with my account
i have a question about my bill
i want to cancel my order
what can you do
who are you
are you a robot
yes
no
yes please
no thanks
okay
ok
mm hmm
uh huh
yeah
right
sure
thank you
thanks
thank you very much
stop
wait
hold on
actually
never mind
that's all
that's all thanks
goodbye
bye
bye bye
thank you goodbye
see you later
hang up
""".strip().splitlines()

TEMPLATES = (
    "my name is {name}",
    "my name is {name} and i am on the {plan} plan",
    "my name is {name} i'm on the {plan} plan keep your answers short",
    "call me {name}",
    "i am {name}",
    "this is {name}",
    "i'm on the {plan} plan",
    "i am on the {plan} plan",
    "remember that my favourite colour is {colour}",
    "my favourite colour is {colour}",
    "i have {number} children",
    "book a table for {number} on {day}",
    "my number is {number} {number} {number}",
)


def builtin_phrases() -> list[str]:
    phrases = list(SENTENCES)
    for i, template in enumerate(TEMPLATES):
        for j, name in enumerate(NAMES):
            phrases.append(template.format(
                name=name,
                plan=PLANS[(i + j) % len(PLANS)],
                colour=COLOURS[(i + j) % len(COLOURS)],
                number=NUMBERS[(i + j) % len(NUMBERS)],
                day=DAYS[(i + j) % len(DAYS)],
            ))
    return phrases
