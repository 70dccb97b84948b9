"""A synthetic long conversation for memory benchmarks, with questions and their evidence turns.

Many sessions over several months, in Chinese and English. Facts about the
user are stated once, in one turn, in one language; the question about a
fact is paraphrased (few shared words) and in about a third of the cases
asked in the other language. Every fact type has distractor turns that
share its words but not its meaning ("my dog is called X" vs "the dog
show on TV"), so a method that matches words alone is tested where it
fails. Some questions need two turns (who my sister is + what she does).

Deterministic for a seed. ``python bench/memdata.py OUT_DIR`` writes
``turns.jsonl`` (the import format) and ``questions.jsonl``.
"""

from __future__ import annotations

import json
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Each fact: value pools, statements (en/zh), questions (en/zh), distractors (any language).
# {v} is the fact's value; statements always contain the value, questions never do.
FACTS: list[dict[str, Any]] = [
    {
        "key": "dog_name", "values": ["Biscuit", "Mochi", "Pepper", "Rocky"],
        "en": ["We finally adopted a puppy last weekend, we named him {v}.", "Our new puppy {v} chewed my slippers again."],
        "zh": ["上周末我们终于领养了一只小狗，给它起名叫{v}。", "我家新来的小狗{v}又把我的拖鞋咬坏了。"],
        "q_en": ["What is my pet called?", "What name did we give the puppy?"],
        "q_zh": ["我的宠物叫什么名字？", "我们给小狗起了什么名字？"],
        "distract": ["There was a dog show on TV tonight, the poodles were hilarious.", "狗粮又涨价了，超市里一袋要两百块。",
                     "My neighbour's dog barks every night at 3am.", "What name should a bakery have? Just curious."],
    },
    {
        "key": "employer", "values": ["a small bakery", "Siemens", "the city library", "a startup making drones"],
        "en": ["I started my new job at {v} on Monday, the commute is long.", "Busy day at {v}, I only got home at nine."],
        "zh": ["我周一开始在{v}上班了，通勤好远。", "今天在{v}加班到九点才回家。"],
        "q_en": ["Where am I employed these days?", "Which company do I work for?"],
        "q_zh": ["我现在在哪里工作？", "我的雇主是谁？"],
        "distract": ["The job market news today was depressing.", "周一的地铁太挤了，根本上不去。",
                     "I read an article about startups failing in their first year.", "图书馆周末不开门，真不方便。"],
    },
    {
        "key": "allergy", "values": ["peanuts", "shellfish", "cats", "penicillin"],
        "en": ["Remember that I'm allergic to {v}, it can get serious.", "The doctor confirmed my allergy to {v} today."],
        "zh": ["记住我对{v}过敏，严重的时候会喘不上气。", "医生今天确认了我对{v}过敏。"],
        "q_en": ["Is there anything I must avoid eating or touching for health reasons?", "What am I allergic to?"],
        "q_zh": ["我有什么过敏的东西吗？", "哪些东西我身体接受不了？"],
        "distract": ["Peanuts is still my favourite comic strip.", "这家海鲜餐厅的装修很好看。",
                     "The doctor's office was closed today, so annoying.", "春天花粉太多了，大家都在打喷嚏。"],
    },
    {
        "key": "home_city", "values": ["Lyon", "Chengdu", "Vancouver", "Hangzhou"],
        "en": ["We moved into a flat in {v} last month, still unpacking boxes.", "Living in {v} now, the food here is great."],
        "zh": ["我们上个月搬到了{v}的一套公寓，箱子还没拆完。", "现在住在{v}，这里的吃的太棒了。"],
        "q_en": ["Which city do I live in?", "Where is my home now?"],
        "q_zh": ["我住在哪个城市？", "我现在的家在哪里？"],
        "distract": ["I watched a documentary about moving boxes and logistics.", "这座城市的交通规划真是一团糟。",
                     "Home prices are crazy everywhere.", "我朋友说他想搬家但是一直没找到房子。"],
    },
    {
        "key": "birthday", "values": ["March 3rd", "July 21st", "October 9th", "December 30th"],
        "en": ["My birthday is on {v}, don't let me forget to plan something.", "I was born on {v}, a very cold day apparently."],
        "zh": ["我的生日是{v}，到时候提醒我安排一下。", "我是{v}出生的，听说那天特别冷。"],
        "q_en": ["When should we celebrate my birthday?", "What day was I born?"],
        "q_zh": ["我的生日是哪天？", "我是哪一天出生的？"],
        "distract": ["Birthday cakes are so expensive now.", "今天是我同事的生日，我们一起吃了蛋糕。",
                     "What day is it today? I lost track.", "冬天太冷了，根本不想出门。"],
    },
    {
        "key": "wifi_password", "values": ["sunflower42", "blue-otter-7", "mango2024", "tiger!lily"],
        "en": ["The new wifi password is {v}, I stuck it on the fridge.", "Changed the router password to {v} today."],
        "zh": ["新的无线网密码是{v}，我贴在冰箱上了。", "今天把路由器的密码改成了{v}。"],
        "q_en": ["How do guests get on our internet?", "What's the network key at home?"],
        "q_zh": ["家里的Wi-Fi密码是多少？", "客人来了怎么连网？"],
        "distract": ["The fridge is making a weird humming noise.", "我忘了银行卡的密码，只好去柜台重置。",
                     "Password managers are a good idea, everyone says.", "路由器放在客厅信号最好。"],
    },
    {
        "key": "favorite_movie", "values": ["Interstellar", "Spirited Away", "The Matrix", "Amélie"],
        "en": ["My all-time favourite film is {v}, I've seen it ten times.", "Rewatched {v} tonight, still the best film ever."],
        "zh": ["我最喜欢的电影是《{v}》，看了十遍了。", "今晚又重温了《{v}》，还是最好看的电影。"],
        "q_en": ["Which movie do I love the most?", "What film would I recommend above all others?"],
        "q_zh": ["我最爱的电影是哪部？", "我看了最多遍的片子是什么？"],
        "distract": ["The cinema near us closed down.", "这部新电影的评分太低了，不想看。",
                     "I fell asleep during the film last night.", "电视上在放一部老片子，挺无聊的。"],
    },
    {
        "key": "sister", "values": ["Anna", "Mei", "Sofia", "Lin"],
        "en": ["My older sister {v} is visiting us next month.", "Had a long call with my sister {v} today."],
        "zh": ["我姐姐{v}下个月来看我们。", "今天和姐姐{v}打了很久的电话。"],
        "q_en": ["What is my sister's name?", "Who is my older sibling?"],
        "q_zh": ["我姐姐叫什么？", "我的姐姐是谁？"],
        "distract": ["My colleague's sister is getting married.", "下个月的日程已经排满了。",
                     "A long call with the bank about my account.", "我表妹在准备考研。"],
    },
    {
        "key": "car", "values": ["a red Toyota Corolla", "an old blue Volvo", "a white Tesla", "a green Mini"],
        "en": ["I bought {v} second-hand, it drives fine.", "Parked {v} in the garage, finally got it washed."],
        "zh": ["我买了一辆二手车，是{v}，开起来还不错。", "把{v}停进车库了，终于洗干净了。"],
        "q_en": ["What vehicle do I drive?", "What kind of car do I own?"],
        "q_zh": ["我开的是什么车？", "我有一辆什么样的车？"],
        "distract": ["Car insurance renewal came in the mail.", "停车场又涨价了。",
                     "Second-hand bookstores are my favourite place.", "我邻居买了一辆新的摩托车。"],
    },
    {
        "key": "hobby", "values": ["rock climbing", "playing the cello", "pottery", "birdwatching"],
        "en": ["I've taken up {v} on weekends, it's so relaxing.", "Spent Saturday {v}, my arms are sore."],
        "zh": ["我周末开始学{v}了，特别放松。", "周六一整天都在{v}，胳膊好酸。"],
        "q_en": ["What do I do in my free time?", "What hobby did I pick up?"],
        "q_zh": ["我业余时间喜欢做什么？", "我最近培养了什么爱好？"],
        "distract": ["Weekends are too short.", "周六下雨了，哪儿也没去。",
                     "My arms are sore from carrying groceries.", "放松的方法有很多，比如冥想。"],
    },
    {
        "key": "doctor_appt", "values": ["next Tuesday at 10", "Friday afternoon", "the 14th at 9am", "Thursday morning"],
        "en": ["My dentist appointment is {v}, remind me.", "Booked the dentist for {v}."],
        "zh": ["我的牙医预约在{v}，记得提醒我。", "约了牙医，时间是{v}。"],
        "q_en": ["When do I need to see the dentist?", "When is my dental check-up?"],
        "q_zh": ["我什么时候去看牙？", "牙科的预约是哪天？"],
        "distract": ["The dentist on TV said to floss more.", "提醒我明天买牛奶。",
                     "My appointment with the bank got cancelled.", "牙膏用完了，要去超市买。"],
    },
    {
        "key": "favorite_food", "values": ["spicy hotpot", "ramen", "dumplings", "mapo tofu"],
        "en": ["Nothing beats {v}, I could eat it every day.", "Had {v} again for dinner, my favourite meal."],
        "zh": ["没有什么比{v}更好吃了，我可以天天吃。", "晚饭又吃了{v}，我最爱的一道菜。"],
        "q_en": ["What's my favourite thing to eat?", "Which dish do I like best?"],
        "q_zh": ["我最喜欢吃什么？", "我最爱的菜是哪道？"],
        "distract": ["Dinner was late because the oven broke.", "这家店的菜太咸了。",
                     "Every day the same commute, so boring.", "超市的速冻食品在打折。"],
    },
    {
        "key": "language_learning", "values": ["Japanese", "Spanish", "German", "Korean"],
        "en": ["I'm learning {v} with an app, twenty minutes a day.", "My {v} teacher said my pronunciation improved."],
        "zh": ["我在用一个应用学{v}，每天二十分钟。", "我的{v}老师说我的发音进步了。"],
        "q_en": ["Which foreign language am I studying?", "What language have I been practising?"],
        "q_zh": ["我在学哪门外语？", "我最近在练习什么语言？"],
        "distract": ["The app store was down for an hour.", "老师布置的作业太多了。",
                     "Pronunciation of some names is hard.", "每天二十分钟的运动很重要。"],
    },
    {
        "key": "kid_school", "values": ["Maple Elementary", "实验小学", "Riverside Primary", "阳光小学"],
        "en": ["Our son starts at {v} in September.", "Parent meeting at {v} tonight."],
        "zh": ["我儿子九月份去{v}上学。", "今晚要去{v}开家长会。"],
        "q_en": ["Which school does my son attend?", "Where does our boy go to school?"],
        "q_zh": ["我儿子在哪个学校读书？", "孩子上的是哪所学校？"],
        "distract": ["September is my favourite month.", "今晚的会议开到很晚。",
                     "School buses are always late here.", "邻居家的孩子考上了大学。"],
    },
    {
        "key": "blood_type", "values": ["O negative", "AB positive", "A positive", "B negative"],
        "en": ["For the record, my blood type is {v}.", "The donation centre said I'm {v}."],
        "zh": ["备忘一下，我的血型是{v}。", "献血中心说我是{v}血型。"],
        "q_en": ["What is my blood group?", "Which blood type do I have?"],
        "q_zh": ["我是什么血型？", "我的血型是哪种？"],
        "distract": ["The record shop downtown is closing.", "献血的人今天特别多。",
                     "Blood pressure monitors are on sale.", "备忘录应用又崩溃了。"],
    },
    {
        "key": "phone", "values": ["a Pixel 8", "an iPhone 13", "a Xiaomi 14", "a Fairphone"],
        "en": ["Switched to {v}, the battery is much better.", "My phone is {v} now, the camera is great."],
        "zh": ["我换了{v}，电池好多了。", "我现在用的手机是{v}，拍照很好。"],
        "q_en": ["What mobile do I use?", "Which smartphone do I have?"],
        "q_zh": ["我用的是什么手机？", "我现在的手机型号是什么？"],
        "distract": ["The battery of the smoke alarm died.", "相机店的老板很热情。",
                     "Phone calls from unknown numbers are annoying.", "电池回收点在小区门口。"],
    },
    {
        "key": "partner_job", "values": ["a nurse", "an architect", "a primary school teacher", "a software engineer"],
        "en": ["My wife works as {v}, her shifts are long.", "My wife got promoted, she's been {v} for years."],
        "zh": ["我妻子是{v}，工作时间很长。", "我老婆升职了，她当{v}好多年了。"],
        "q_en": ["What does my spouse do for a living?", "What is my wife's profession?"],
        "q_zh": ["我妻子做什么工作？", "我爱人的职业是什么？"],
        "distract": ["Long shifts at the factory are hard.", "升职加薪的消息都是假的。",
                     "Architecture tours are popular in summer.", "我同事的老公在银行上班。"],
    },
    {
        "key": "gym_days", "values": ["Mondays and Thursdays", "every morning", "Tuesdays", "weekends"],
        "en": ["I go to the gym {v} now, trying to stay consistent.", "Gym schedule: {v}, no excuses."],
        "zh": ["我现在{v}去健身房，努力坚持。", "健身计划：{v}，不找借口。"],
        "q_en": ["When do I work out?", "Which days do I exercise?"],
        "q_zh": ["我哪几天去健身？", "我什么时候锻炼？"],
        "distract": ["The gym membership ads are everywhere.", "坚持是最难的事情。",
                     "No excuses for missing the train again.", "健身房旁边新开了一家奶茶店。"],
    },
    {
        "key": "fear", "values": ["heights", "deep water", "spiders", "thunderstorms"],
        "en": ["Honestly I'm terrified of {v}, always have been.", "Had a nightmare about {v} again."],
        "zh": ["说实话我特别怕{v}，从小就怕。", "又做了一个关于{v}的噩梦。"],
        "q_en": ["What scares me?", "What am I afraid of?"],
        "q_zh": ["我害怕什么？", "什么东西让我感到恐惧？"],
        "distract": ["Honestly the weather has been fine.", "昨晚做了个很奇怪的梦，梦见在考试。",
                     "Horror movies are not my thing.", "小时候住在乡下，每天爬树。"],
    },
    {
        "key": "coffee", "values": ["oat milk flat white", "black americano", "iced latte", "espresso with sugar"],
        "en": ["My usual coffee order is an {v}.", "Always order an {v} at the cafe."],
        "zh": ["我平时点的咖啡是{v}。", "去咖啡店我总是点{v}。"],
        "q_en": ["How do I take my coffee?", "What should you get me at the café?"],
        "q_zh": ["我喝咖啡一般点什么？", "帮我买咖啡的话该买哪种？"],
        "distract": ["The coffee machine at work broke.", "咖啡店的音乐太吵了。",
                     "Orders from the online shop take forever.", "牛奶又涨价了。"],
    },
]

# Two-turn questions: the first statement links a role to a name, the second says something about the name.
CHAINS: list[dict[str, Any]] = [
    {
        "names": ["Tom", "Lena", "Kenji", "小王"],
        "first_en": "My best friend is {n}, we met at university.", "first_zh": "我最好的朋友是{n}，我们大学认识的。",
        "second": [("en", "{n} just moved to {x} for a new job.", ["Oslo", "Shenzhen", "Toronto"]),
                   ("zh", "{n}刚刚为了新工作搬去了{x}。", ["深圳", "奥斯陆", "多伦多"])],
        "q_en": "Where does my best friend live now?", "q_zh": "我最好的朋友现在住在哪里？",
    },
    {
        "names": ["Grace", "Hannah", "美玲", "Yuki"],
        "first_en": "Our neighbour is called {n}, she has a vegetable garden.", "first_zh": "我们的邻居叫{n}，她有一个菜园。",
        "second": [("en", "{n} gave us {x} from her garden.", ["tomatoes", "zucchini", "green beans"]),
                   ("zh", "{n}从她的园子里送了我们一些{x}。", ["西红柿", "黄瓜", "豆角"])],
        "q_en": "What vegetables did the neighbour share with us?", "q_zh": "邻居送了我们什么菜？",
    },
    {
        "names": ["Dr. Weber", "Dr. Chen", "李医生", "Dr. Patel"],
        "first_en": "My family doctor is {n} at the clinic on Park Street.", "first_zh": "我的家庭医生是公园街诊所的{n}。",
        "second": [("en", "{n} told me to cut down on {x}.", ["salt", "sugar", "caffeine"]),
                   ("zh", "{n}让我少吃{x}。", ["盐", "糖", "辣椒"])],
        "q_en": "What did my GP advise me to reduce?", "q_zh": "家庭医生建议我少吃什么？",
    },
    {
        "names": ["Max", "Olivia", "小杰", "Ravi"],
        "first_en": "My manager is {n}, pretty fair most of the time.", "first_zh": "我的领导是{n}，大部分时候还算公平。",
        "second": [("en", "{n} is going on leave to {x} next week.", ["Bali", "Iceland", "Peru"]),
                   ("zh", "{n}下周要去{x}休假。", ["巴厘岛", "冰岛", "秘鲁"])],
        "q_en": "Where is my boss travelling on holiday?", "q_zh": "我的上司要去哪里度假？",
    },
]

SMALLTALK_EN = [
    "How's the weather looking for tomorrow?", "I'm so tired today, long week.", "Any ideas for a quick dinner?",
    "Can you remind me to call the plumber later?", "I finished the book I was reading.", "Traffic was awful this morning.",
    "Tell me a joke please.", "I think I'll go to bed early tonight.", "The laundry is piling up again.",
    "I need to buy a present for a colleague.", "What's a good podcast about history?", "It rained all afternoon.",
    "My back hurts from sitting all day.", "Let's plan the weekend.", "I should drink more water.",
]
SMALLTALK_ZH = [
    "明天天气怎么样？", "今天好累啊，这周太长了。", "晚饭吃什么好呢？", "提醒我等会儿给水管工打电话。",
    "我把那本书看完了。", "早上堵车堵得厉害。", "给我讲个笑话吧。", "今晚想早点睡。", "衣服又堆成山了。",
    "要给同事买个礼物。", "有什么好听的历史播客吗？", "下午一直在下雨。", "坐了一天腰疼。", "我们来计划一下周末吧。",
    "我应该多喝水。",
]
SMALL_EN_PARTS = (
    ["This morning", "Tonight", "Earlier today", "Yesterday", "Right now", "After lunch"],
    ["I feel a bit {a}", "the {n} was {a}", "I found the {n} {a}", "everyone said the {n} looked {a}"],
    ["tired", "lovely", "strange", "boring", "noisy", "calm", "expensive", "fun"],
    ["weather", "meeting", "bus ride", "podcast", "walk", "news", "queue", "playlist", "email", "game"],
)
SMALL_ZH_PARTS = (
    ["今天早上", "今晚", "刚才", "昨天", "现在", "午饭后"],
    ["我觉得有点{a}", "那个{n}挺{a}的", "大家都说{n}很{a}", "我发现{n}有点{a}"],
    ["累", "好", "奇怪", "无聊", "吵", "安静", "贵", "有意思"],
    ["天气", "会议", "公交", "播客", "散步", "新闻", "排队", "歌单", "邮件", "比赛"],
)


def small_talk(rng: random.Random, lang: str) -> str:
    if rng.random() < 0.3:
        return rng.choice(SMALLTALK_ZH if lang == "zh" else SMALLTALK_EN)
    when, tmpl, adjs, nouns = SMALL_ZH_PARTS if lang == "zh" else SMALL_EN_PARTS
    body = rng.choice(tmpl).format(a=rng.choice(adjs), n=rng.choice(nouns))
    return f"{rng.choice(when)}{body}。" if lang == "zh" else f"{rng.choice(when)} {body}."


REPLIES_EN = ["Got it, I'll remember that.", "Sounds good!", "Noted.", "That makes sense.", "Okay, thanks for telling me.",
              "Sure, here's an idea: keep it simple.", "I hope it gets better soon."]
REPLIES_ZH = ["好的，我记住了。", "听起来不错！", "已记录。", "明白了。", "好的，谢谢告诉我。", "可以，简单点就好。", "希望会好起来。"]


NAMED_EN = ["What did I tell you about {v}?", "Remind me what I said regarding {v}.", "Anything noted about {v}?"]
NAMED_ZH = ["我之前提到{v}是怎么说的？", "关于{v}我跟你说过什么？", "{v}那件事是怎么回事来着？"]


@dataclass
class Dataset:
    turns: list[dict[str, Any]] = field(default_factory=list)
    questions: list[dict[str, Any]] = field(default_factory=list)


def generate(seed: int = 7, sessions: int = 48, *, facts_per_session: float = 0.7) -> Dataset:
    """The conversation (``turns`` in import format, with ``session``) and ``questions`` with evidence ids."""
    rng = random.Random(seed)
    ds = Dataset()
    start = 1_700_000_000.0  # Nov 2023
    # Plan: which session states which fact / chain part.
    events: list[tuple[str, Any]] = []
    for fact in FACTS:
        events.append(("fact", fact))
    for chain in CHAINS:
        events.append(("chain1", chain))
        events.append(("chain2", chain))
    slots: dict[int, list[tuple[str, Any]]] = {s: [] for s in range(sessions)}
    chain_first: dict[int, int] = {}
    for kind, item in events:
        if kind == "chain2":
            s = rng.randrange(min(chain_first[id(item)] + 2, sessions - 1), sessions)
        else:
            s = rng.randrange(0, sessions - 4 if kind == "chain1" else sessions)
            if kind == "chain1":
                chain_first[id(item)] = s
        slots[s].append((kind, item))
    distractors = [d for f in FACTS for d in f["distract"]]
    rng.shuffle(distractors)
    d_iter = iter(distractors * 3)
    chain_state: dict[int, dict[str, Any]] = {}
    turn_no = 0
    t = start
    for s in range(sessions):
        t += rng.uniform(0.5, 4.0) * 86400
        lang_pref = "zh" if rng.random() < 0.5 else "en"
        plan: list[tuple[str, Any]] = list(slots[s])
        n_small = rng.randint(4, 9)
        plan += [("small", None)] * n_small
        plan += [("distract", None)] * rng.randint(1, 3)
        rng.shuffle(plan)
        for kind, item in plan:
            lang = lang_pref if rng.random() < 0.75 else ("en" if lang_pref == "zh" else "zh")
            evidence_for: tuple[str, Any] | None = None
            v = ""
            if kind == "small":
                text = small_talk(rng, lang)
            elif kind == "distract":
                text = next(d_iter)
            elif kind == "fact":
                v = rng.choice(item["values"])
                text = rng.choice(item[lang]).format(v=v)
                evidence_for = ("fact", item)
            elif kind == "chain1":
                n = rng.choice(item["names"])
                chain_state[id(item)] = {"name": n}
                text = item["first_zh" if lang == "zh" else "first_en"].format(n=n)
                evidence_for = ("chain1", item)
            else:
                st = chain_state[id(item)]
                lang2, tmpl, xs = rng.choice(item["second"])
                text = tmpl.format(n=st["name"], x=rng.choice(xs))
                evidence_for = ("chain2", item)
                lang = lang2
            t += rng.uniform(20, 600)
            uid = f"t{turn_no:05d}"
            turn_no += 1
            ds.turns.append({"id": uid, "role": "user", "content": text, "timestamp": round(t, 3),
                             "speaker": "me", "session": s})
            t += rng.uniform(2, 30)
            reply = rng.choice(REPLIES_ZH if lang == "zh" else REPLIES_EN)
            ds.turns.append({"id": f"t{turn_no:05d}", "role": "assistant", "content": reply,
                             "timestamp": round(t, 3), "speaker": "agent", "session": s})
            turn_no += 1
            if evidence_for is None:
                continue
            ek, eitem = evidence_for
            if ek == "fact":
                for q_lang in ("en", "zh"):
                    # one question per language: same-language and cross-language cases both occur
                    q = rng.choice(eitem["q_" + q_lang])
                    ds.questions.append({"query": q, "evidence": [uid], "kind": "single",
                                         "cross_lingual": q_lang != lang, "fact": eitem["key"]})
                # and one that names the thing (people ask "what did I say about Biscuit?")
                named = rng.choice(NAMED_EN if rng.random() < 0.5 else NAMED_ZH).format(v=v.removeprefix("a ").removeprefix("an "))
                ds.questions.append({"query": named, "evidence": [uid], "kind": "named",
                                     "cross_lingual": False, "fact": eitem["key"]})
            elif ek == "chain1":
                chain_state[id(eitem)]["first_id"] = uid
            else:
                first = chain_state[id(eitem)]["first_id"]
                for q_lang in ("en", "zh"):
                    ds.questions.append({"query": eitem["q_" + q_lang], "evidence": [first, uid], "kind": "two_turn",
                                         "cross_lingual": False, "fact": "chain"})
                name = chain_state[id(eitem)]["name"]
                ds.questions.append({"query": rng.choice(NAMED_EN + NAMED_ZH).format(v=name), "evidence": [first, uid],
                                     "kind": "two_turn_named", "cross_lingual": False, "fact": "chain"})
    return ds


def synthetic_texts(n: int, seed: int = 11) -> list[str]:
    """``n`` varied short texts (both languages) for scaling benchmarks."""
    rng = random.Random(seed)
    pools: list[str] = []
    for f in FACTS:
        for lang in ("en", "zh"):
            pools.extend(x.format(v=v) for x in f[lang] for v in f["values"])
        pools.extend(f["distract"])
    pools += SMALLTALK_EN + SMALLTALK_ZH
    words_en = "apple river window music garden train letter orange silver market cloud paper".split()
    words_zh = ["苹果", "河流", "窗户", "音乐", "花园", "火车", "信件", "橙子", "银色", "市场", "云朵", "纸张"]
    out = []
    for i in range(n):
        base = rng.choice(pools)
        extra = " ".join(rng.choice(words_en) for _ in range(rng.randint(1, 4)))
        extra_zh = "".join(rng.choice(words_zh) for _ in range(rng.randint(1, 3)))
        out.append(f"{base} {extra} {extra_zh} #{i}")
    return out


def write(ds: Dataset, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    with (out_dir / "turns.jsonl").open("w", encoding="utf-8") as f:
        for t in ds.turns:
            f.write(json.dumps(t, ensure_ascii=False) + "\n")
    with (out_dir / "questions.jsonl").open("w", encoding="utf-8") as f:
        for q in ds.questions:
            f.write(json.dumps(q, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    data = generate()
    write(data, Path(sys.argv[1] if len(sys.argv) > 1 else "memdata"))
    kinds: dict[str, int] = {}
    for q in data.questions:
        kinds[q["kind"]] = kinds.get(q["kind"], 0) + 1
    print(f"{len(data.turns)} turns, {len(data.questions)} questions {kinds}")
