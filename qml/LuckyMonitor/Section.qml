import QtQuick
import QtQuick.Controls
import QtQuick.Layouts

// A titled group of rows: a small caps title with a rule, then the content.
ColumnLayout {
    id: root
    property string title
    // A short note at the end of the title's rule (how often the values refresh, a command's answer); none
    // when empty. It takes the rule's room, never a line of its own: the rows below never move for it.
    property string aside: ""
    property color asideColor: Theme.dim
    property string asideTip: ""
    default property alias content: body.data

    Layout.fillWidth: true
    spacing: 4

    RowLayout {
        Layout.fillWidth: true
        Layout.topMargin: 6
        spacing: 8
        Label {
            text: root.title.toUpperCase()
            color: Theme.accent
            font.pixelSize: Theme.title
            font.bold: true
            font.letterSpacing: 1.2
        }
        Rectangle {
            Layout.fillWidth: true
            Layout.preferredHeight: 1
            Layout.alignment: Qt.AlignVCenter
            color: Theme.line
        }
        Label {
            objectName: "aside_" + root.title
            visible: root.aside !== ""
            text: root.aside
            textFormat: Text.PlainText  // never markup: engine text shows as the characters it is
            color: root.asideColor
            font.pixelSize: Theme.small
            elide: Text.ElideRight
            Layout.maximumWidth: root.width * 0.6  // a long refusal elides; the title stays whole
            HoverHandler { id: asideHover }
            ToolTip.visible: asideHover.hovered && (root.asideTip !== "" || truncated)
            ToolTip.text: root.asideTip !== "" ? root.asideTip : root.aside
            ToolTip.delay: 400
        }
    }
    ColumnLayout {
        id: body
        Layout.fillWidth: true
        spacing: 2
    }
}
