// A bokeh chart as an anywidget, with no CDN and no output_notebook(): the first chart on a page asks
// Python for bokeh's core JS (from the installed bokeh package, so the versions match), runs it once,
// then every chart embeds its json_item.
let loading = null;

function ensureBokeh(model) {
  if (window.Bokeh && window.Bokeh.embed) return Promise.resolve(window.Bokeh);
  if (!loading) {
    loading = new Promise((resolve) => {
      model.on("msg:custom", (message) => {
        if (!message || message.kind !== "bokeh-js" || (window.Bokeh && window.Bokeh.embed)) {
          if (window.Bokeh && window.Bokeh.embed) resolve(window.Bokeh);
          return;
        }
        const script = document.createElement("script");
        script.textContent = message.code;
        document.head.appendChild(script);
        resolve(window.Bokeh);
      });
      model.send({ kind: "bokeh-js" });
    });
  }
  return loading;
}

async function render({ model, el }) {
  const box = document.createElement("div");
  box.className = "uv-bokeh";
  el.appendChild(box);
  const Bokeh = await ensureBokeh(model);
  const draw = () => {
    box.innerHTML = "";
    Bokeh.embed.embed_item(JSON.parse(model.get("item")), box);
    box.dataset.drawn = "1";
  };
  draw();
  model.on("change:item", draw);
}

export default { render };
